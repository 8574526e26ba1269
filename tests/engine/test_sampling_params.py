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
        {"n": 0},
        {"n": 17},
        {"min_tokens": -1},
        {"min_tokens": 20, "max_tokens": 10},
        {"repetition_penalty": 0.0},
        {"presence_penalty": 2.5},
        {"frequency_penalty": -3.0},
        {"logit_bias": {5: 101.0}},
        {"logit_bias": {-1: 1.0}},
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
