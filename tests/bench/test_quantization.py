"""The quality measures of `bench quantization` on the tiny model: perplexity by chunks equals
perplexity in one pass, and agreement counts tokens up to the first difference."""

import math

import pytest
import torch

from ragserve.bench.quantization import agreement, perplexity
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine


def test_agreement_counts_tokens_before_the_first_difference():
    reference = [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert agreement(reference, reference) == (1.0, 1.0)
    assert agreement([[1, 2, 9, 4], [5, 6, 7, 8]], reference) == (0.75, 0.5)
    assert agreement([[9, 2, 3, 4], [5, 6, 7, 9]], reference) == (0.375, 0.0)


@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_perplexity_in_chunks_is_perplexity_in_one_pass(tiny_model_dir, quantization):
    def engine(chunk: int) -> LLMEngine:
        return LLMEngine(
            EngineConfig(
                model=str(tiny_model_dir),
                dtype="float32",
                quantization=quantization,
                max_num_batched_tokens=chunk,
            )
        )

    text = torch.randint(1000, 40000, (300,), generator=torch.Generator().manual_seed(0))
    whole = perplexity(engine(512), text.tolist())
    chunked = perplexity(engine(64), text.tolist())
    assert math.isclose(whole, chunked, rel_tol=1e-4)
    # A random-weight model is no better than chance over its vocabulary, and no worse than
    # a wide margin above it.
    vocab = engine(512).model.spec.vocab_size
    assert vocab / 4 < whole < vocab * 4
