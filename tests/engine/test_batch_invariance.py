"""The batch-invariant mode in bfloat16: a prompt's greedy tokens, and the log-probabilities
they were chosen with, are the same bits cold, served from the prefix cache, inside a batch of
other prompts and with prompts chunked differently."""

import random

import pytest

from ragserve.engine import kernels
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.engine.sampling_params import SamplingParams

PROMPT_LENS = (100, 600, 1500)
SENTENCE = (
    "the report says that our team will review each contract before the board meets in "
    "spring while sales in the north region grew faster than costs and the new office opens "
    "after a delay caused by permits for the building near the river"
)
KV_BYTES = 8192 * 18432  # 8192 bfloat16 tokens of the default model


def text_prompt(engine: LLMEngine, length: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    ids: list[int] = []
    while len(ids) < length:
        sentence = " ".join(rng.choice(SENTENCE.split()) for _ in range(rng.randint(6, 14)))
        ids += engine.tokenizer.encode(sentence.capitalize() + ". ", add_special_tokens=False)
    return ids[:length]


def make_engine(
    max_num_batched_tokens: int, batch_invariant: bool = False, quantization: str = "none"
) -> LLMEngine:
    return LLMEngine(
        EngineConfig(
            dtype="bfloat16",
            kv_cache_memory_bytes=KV_BYTES,
            max_num_batched_tokens=max_num_batched_tokens,
            batch_invariant=batch_invariant,
            quantization=quantization,
        )
    )


def run(
    engine: LLMEngine, prompts: dict[str, list[int]], batch_invariant: bool = True
) -> dict[str, tuple]:
    """Greedy completions of all prompts submitted together: request id -> (token ids,
    chosen tokens' log-probabilities, prompt tokens served from the prefix cache)."""
    params = SamplingParams(
        max_tokens=12, temperature=0, logprobs=1, batch_invariant=batch_invariant
    )
    for request_id, prompt in prompts.items():
        engine.add_request(prompt, params, request_id=request_id)
    results = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                completion = output.outputs[0]
                chosen = [
                    step[token]
                    for step, token in zip(completion.logprobs, completion.token_ids, strict=True)
                ]
                results[output.request_id] = (
                    completion.token_ids,
                    chosen,
                    output.num_cached_tokens,
                )
    return results


@pytest.fixture(scope="module")
def engine() -> LLMEngine:
    return make_engine(512)


@pytest.fixture(scope="module")
def cold(engine: LLMEngine) -> dict[int, tuple]:
    return {
        length: run(engine, {"cold": text_prompt(engine, length, length)})["cold"]
        for length in PROMPT_LENS
    }


@pytest.mark.parametrize("length", PROMPT_LENS)
def test_prefix_cached_prompt_gives_the_same_tokens(engine, cold, length):
    tokens, logprobs, cached = run(engine, {"again": text_prompt(engine, length, length)})["again"]
    assert cached >= length - length % 16 - 16  # all but the last block came from the cache
    assert (tokens, logprobs) == cold[length][:2]


def test_prompts_inside_a_batch_give_the_same_tokens(engine, cold):
    others = {f"other{i}": text_prompt(engine, 150 + 40 * i, 1000 + i) for i in range(8)}
    # A fresh engine, so the targets are computed in the batch rather than served from cache.
    batched = make_engine(512)
    targets = {f"target{n}": text_prompt(engine, n, n) for n in PROMPT_LENS}
    results = run(batched, others | targets)
    for length in PROMPT_LENS:
        tokens, logprobs, cached = results[f"target{length}"]
        assert cached == 0
        assert (tokens, logprobs) == cold[length][:2]


def test_other_chunk_sizes_give_the_same_tokens(engine, cold):
    rechunked = make_engine(200)
    for length in PROMPT_LENS:
        tokens, logprobs, _ = run(rechunked, {"small": text_prompt(engine, length, length)})[
            "small"
        ]
        assert (tokens, logprobs) == cold[length][:2]


def test_the_engine_setting_makes_every_request_invariant(engine, cold):
    invariant = make_engine(200, batch_invariant=True)
    prompt = text_prompt(engine, PROMPT_LENS[1], PROMPT_LENS[1])
    tokens, logprobs, _ = run(invariant, {"plain": prompt}, batch_invariant=False)["plain"]
    assert (tokens, logprobs) == cold[PROMPT_LENS[1]][:2]


def test_int8_weights_keep_the_guarantee(engine):
    """With int8 weights a prompt's tokens are the same alone, chunked otherwise and inside a
    batch."""
    prompt = text_prompt(engine, PROMPT_LENS[1], PROMPT_LENS[1])
    alone = run(make_engine(512, quantization="int8"), {"alone": prompt})["alone"]
    others = {f"other{i}": text_prompt(engine, 150 + 40 * i, 1000 + i) for i in range(4)}
    batched = run(make_engine(200, quantization="int8"), others | {"target": prompt})["target"]
    assert batched[:2] == alone[:2]


@pytest.mark.skipif(
    not kernels.packed_long_inputs() or kernels.extension() is None,
    reason="oneDNN takes long bfloat16 inputs on this CPU",
)
def test_where_the_packed_kernel_takes_every_length_the_default_mode_is_invariant(engine, cold):
    """With AVX-512 BF16 and no AMX every bfloat16 projection runs in the packed kernel at every
    length, so a request that does not ask for invariance gets its bits all the same, inside a
    batch and chunked otherwise."""
    prompt = text_prompt(engine, PROMPT_LENS[1], PROMPT_LENS[1])
    others = {f"other{i}": text_prompt(engine, 150 + 40 * i, 1000 + i) for i in range(4)}
    results = run(make_engine(200), others | {"target": prompt}, batch_invariant=False)
    assert results["target"][:2] == cold[PROMPT_LENS[1]][:2]
