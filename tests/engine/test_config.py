from types import SimpleNamespace

import pytest

from ragserve.engine import config
from ragserve.engine.config import AVX512_NEEDS, EngineConfig, size_kv_cache


@pytest.mark.parametrize(("native", "expected"), [(True, "bfloat16"), (False, "float32")])
def test_auto_dtype_is_bfloat16_only_where_the_cpu_computes_it(monkeypatch, native, expected):
    monkeypatch.setattr(config, "native_bf16", lambda: native)
    assert EngineConfig().dtype == expected
    assert EngineConfig(dtype="float32").dtype == "float32"


def test_an_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="dtype must be"):
        EngineConfig(dtype="float16")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_num_seqs", 0, "max_num_seqs must be at least 1"),
        ("speculative_tokens", -1, "speculative_tokens must not be negative"),
        ("speculative_min_acceptance", 1.5, "between 0 and 1"),
        ("speculative_min_acceptance", -0.1, "between 0 and 1"),
    ],
)
def test_out_of_range_limits_are_refused_with_their_name(field, value, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(**{field: value})


def test_an_unknown_quantization_is_refused():
    with pytest.raises(ValueError, match="quantization must be one of none, int8"):
        EngineConfig(quantization="int4")
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of auto, int8"):
        EngineConfig(kv_cache_dtype="fp8")


def test_an_int8_kv_cache_counts_its_scales_and_holds_about_twice_the_tokens():
    shape = SimpleNamespace(
        num_layers=30, num_kv_heads=3, head_dim=64, max_position_embeddings=8192
    )
    bf16 = size_kv_cache(EngineConfig(dtype="bfloat16"), shape)
    int8 = size_kv_cache(EngineConfig(dtype="bfloat16", kv_cache_dtype="int8"), shape)
    assert bf16.bytes_per_token == 2 * 30 * 3 * 64 * 2
    # An int8 byte per element, and a float32 scale per position, kv head, keys and values.
    assert int8.bytes_per_token == 2 * 30 * 3 * (64 + 4)
    assert 1.85 < int8.num_blocks / bf16.num_blocks < 1.9


def test_the_avx2_isa_hides_every_flag_past_avx2(monkeypatch):
    """RAGSERVE_CPU_ISA=avx2: no AVX-512 or AMX flag is seen, so no path is chosen for them
    (and auto runs float32, as on a CPU with AVX2 only); the rest of the flags stay."""
    native = config.cpu_flags.__wrapped__()
    monkeypatch.setenv("RAGSERVE_CPU_ISA", "avx2")
    held = config.cpu_flags.__wrapped__()
    assert not any(flag.startswith(("avx512", "amx", "avx_vnni")) for flag in held)
    assert {"avx2", "fma", "sse4_2"} & native <= held
    monkeypatch.setattr(config, "cpu_flags", lambda: held)
    assert not config.native_bf16()
    assert EngineConfig().dtype == "float32"


def test_the_avx512_isa_hides_amx_and_keeps_the_bfloat16_dot_products(monkeypatch):
    """RAGSERVE_CPU_ISA=avx512 on a CPU with AMX: the paths of an AVX-512 BF16 CPU without it
    (its bfloat16 kernel takes every input length) are chosen."""
    with_amx = AVX512_NEEDS | {"avx2", "fma", "amx_tile", "amx_bf16", "amx_int8"}
    monkeypatch.setattr(config, "machine_flags", lambda: with_amx)
    monkeypatch.setenv("RAGSERVE_CPU_ISA", "avx512")
    held = config.cpu_flags.__wrapped__()
    assert held == AVX512_NEEDS | {"avx2", "fma"}
    monkeypatch.setattr(config, "cpu_flags", lambda: held)
    assert config.native_bf16()
    assert EngineConfig().dtype == "bfloat16"


def test_the_avx512_isa_is_refused_on_a_cpu_without_its_instructions(monkeypatch):
    """Built for instructions the CPU lacks, the kernels would die of an illegal instruction at
    the first token; the setting is refused with what is lacking instead."""
    monkeypatch.setattr(config, "machine_flags", lambda: AVX512_NEEDS - {"avx512_bf16"} | {"avx2"})
    monkeypatch.setenv("RAGSERVE_CPU_ISA", "avx512")
    with pytest.raises(ValueError, match="avx512 needs avx512_bf16, which this CPU lacks"):
        config.cpu_isa()


def test_an_unknown_cpu_isa_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv("RAGSERVE_CPU_ISA", "avx10")
    with pytest.raises(ValueError, match="RAGSERVE_CPU_ISA must be one of native, avx2, avx512"):
        config.cpu_flags.__wrapped__()
