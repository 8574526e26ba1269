import pytest

from ragserve import SamplingParams
from ragserve.engine.errors import InvalidRequestError


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -0.1},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"max_tokens": 0},
        {"top_k": 0},
        {"top_k": -5},
        {"n": 2},
        {"stop": [""]},
        {"stop_token_ids": [-1]},
    ],
)
def test_invalid_values_are_rejected(kwargs):
    with pytest.raises(InvalidRequestError):
        SamplingParams(**kwargs)


def test_defaults_follow_vllm():
    params = SamplingParams()
    assert params.max_tokens == 16 and params.temperature == 1.0 and not params.greedy
    assert SamplingParams(stop="x").stop_strings == ("x",)
