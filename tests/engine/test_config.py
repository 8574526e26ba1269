import pytest

from ragserve.engine import config
from ragserve.engine.config import EngineConfig


@pytest.mark.parametrize(("native", "expected"), [(True, "bfloat16"), (False, "float32")])
def test_auto_dtype_is_bfloat16_only_where_the_cpu_computes_it(monkeypatch, native, expected):
    monkeypatch.setattr(config, "native_bf16", lambda: native)
    assert EngineConfig().dtype == expected
    assert EngineConfig(dtype="float32").dtype == "float32"


def test_an_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="dtype must be"):
        EngineConfig(dtype="float16")
