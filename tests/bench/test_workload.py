import math
import random

import pytest
from transformers import AutoTokenizer

from ragserve.bench.workload import (
    RandomText,
    arrival_gaps,
    random_requests,
    shared_prefix_requests,
    sharegpt_conversations,
    sharegpt_requests,
)
from ragserve.engine.config import DEFAULT_MODEL
from ragserve.engine.loader import resolve_model


@pytest.fixture(scope="module")
def text():
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL))
    return RandomText(tokenizer, random.Random(0))


def test_random_prompts_have_about_the_asked_length(text):
    specs = random_requests(text, 20, (40, 60), (5, 9))
    for spec in specs:
        assert 30 <= spec.prompt_tokens <= 60
        assert spec.prompt_tokens == text.count(spec.prompt)
        assert 5 <= spec.output_tokens <= 9


def test_shared_prefix_groups_share_their_prefix(text):
    specs = shared_prefix_requests(
        text, 6, groups=2, prefix_len=50, input_len=(8, 8), output_len=(4, 4)
    )
    prefix = [s.prompt.split("\n")[0] for s in specs]
    assert prefix[0] == prefix[2] == prefix[4] and prefix[1] == prefix[3]
    assert prefix[0] != prefix[1]
    assert all(s.prompt_tokens > 50 for s in specs)


def test_sharegpt_is_read_entry_by_entry(text):
    first = next(sharegpt_conversations())
    assert first[0]["from"] == "human" and first[1]["from"] == "gpt"
    specs = sharegpt_requests(text, 30, max_prompt=256, max_total=512)
    assert len(specs) == 30
    assert all(
        4 <= s.prompt_tokens <= 256 and s.prompt_tokens + s.output_tokens <= 512 for s in specs
    )


def test_arrival_gaps():
    rng = random.Random(1)
    poisson = arrival_gaps(4000, rate=5.0, burstiness=1.0, rng=rng)
    assert sum(poisson) / len(poisson) == pytest.approx(0.2, rel=0.1)
    bursty = arrival_gaps(4000, rate=5.0, burstiness=0.25, rng=rng)
    assert sum(bursty) / len(bursty) == pytest.approx(0.2, rel=0.2), "same mean rate"
    spread = lambda gaps: math.sqrt(sum((g - 0.2) ** 2 for g in gaps) / len(gaps))  # noqa: E731
    assert spread(bursty) > 1.5 * spread(poisson), "burstier traffic has more uneven gaps"
    assert arrival_gaps(3, math.inf, 1.0, rng) == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        arrival_gaps(3, 0.0, 1.0, rng)
