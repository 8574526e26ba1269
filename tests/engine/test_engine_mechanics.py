"""The engine's mechanics (the KV pool, the prefix cache, preemption, aborts, limits) on a
tiny random-weight model: fast enough for `make test-fast`. Nothing here reads what it writes."""

import pytest

from ragserve import SamplingParams
from ragserve.engine.errors import EngineOverloadedError, InvalidRequestError
from tests.engine.helpers import GREEDY, PROMPTS, assert_no_leak, finish_all
from tests.tiny_model import KV_BYTES_PER_TOKEN


def test_prefix_cache_hits_within_tenant_only(llm_tiny):
    engine = llm_tiny.engine
    prefix = list(range(1000, 1064))
    params = SamplingParams(max_tokens=4, temperature=0)
    engine.add_request([*prefix, 5, 6, 7], params, cache_salt="tenant-a", request_id="p1")
    finish_all(llm_tiny)
    engine.add_request([*prefix, 8, 9], params, cache_salt="tenant-a", request_id="p2")
    engine.add_request([*prefix, 8, 9], params, cache_salt="tenant-b", request_id="p3")
    outputs = {o.request_id: o for o in finish_all(llm_tiny) if o.finished}
    assert outputs["p2"].num_cached_tokens >= 48
    assert outputs["p3"].num_cached_tokens == 0
    assert_no_leak(llm_tiny)


def test_abort_frees_blocks(llm_tiny):
    engine = llm_tiny.engine
    params = SamplingParams(max_tokens=200, temperature=0, ignore_eos=True)
    engine.add_request(PROMPTS[0], params, request_id="keep")
    engine.add_request(PROMPTS[1] * 20, params, request_id="drop-running")
    engine.add_request(PROMPTS[2], params, request_id="drop-waiting")
    engine.step()
    engine.step()
    assert engine.stats().kv_blocks_used > 0
    engine.abort_request("drop-running")
    engine.abort_request("drop-waiting")
    engine.abort_request("keep")
    outputs = engine.step()
    assert {o.request_id for o in outputs if o.finished} == {"keep", "drop-running", "drop-waiting"}
    assert all(o.outputs[0].finish_reason == "abort" for o in outputs)
    assert_no_leak(llm_tiny)


def test_preemption_keeps_greedy_output(make_tiny_llm):
    # 8 blocks of 16 tokens: three 40-token sequences cannot all grow to 72 tokens.
    small = make_tiny_llm(
        kv_cache_memory_bytes=8 * 16 * KV_BYTES_PER_TOKEN, output_reserve_tokens=0
    )
    prompts = [f"{p} {p}" for p in PROMPTS[:3]]
    params = SamplingParams(max_tokens=32, temperature=0, ignore_eos=True)
    together = small.generate(prompts, params)
    assert small.engine.stats().num_preemptions > 0
    assert any(o.metrics.num_preemptions for o in together)
    for prompt, output in zip(prompts, together, strict=True):
        alone = small.generate(prompt, params)[0]
        assert alone.outputs[0].token_ids == output.outputs[0].token_ids
    assert_no_leak(small)


def test_impossible_requests_are_rejected_at_once(llm_tiny):
    engine = llm_tiny.engine
    too_long = list(range(100, 100 + engine.max_model_len))
    with pytest.raises(InvalidRequestError, match="max_model_len"):
        engine.add_request(too_long, GREEDY)
    with pytest.raises(InvalidRequestError, match="max_tokens"):
        engine.add_request([1, 2, 3], SamplingParams(max_tokens=engine.max_model_len))
    with pytest.raises(InvalidRequestError, match="empty"):
        engine.add_request("", GREEDY)
    with pytest.raises(InvalidRequestError, match="token ids"):
        engine.add_request([1, 10**9], GREEDY)
    assert not engine.has_unfinished_requests()


def test_pool_bounds_max_model_len(make_tiny_llm):
    tiny = make_tiny_llm(kv_cache_memory_bytes=4 * 16 * KV_BYTES_PER_TOKEN)
    assert tiny.engine.max_model_len == 64
    with pytest.raises(InvalidRequestError):
        tiny.engine.add_request(list(range(100, 160)), SamplingParams(max_tokens=10))


def test_queue_limit_rejects_with_overload(llm_tiny):
    engine = llm_tiny.engine
    limit = engine.config.max_queued_requests
    engine.config.max_queued_requests = 2
    try:
        engine.add_request("a b c", GREEDY)
        engine.add_request("d e f", GREEDY)
        with pytest.raises(EngineOverloadedError):
            engine.add_request("g h i", GREEDY)
    finally:
        engine.config.max_queued_requests = limit
    finish_all(llm_tiny)


def test_n_choices_share_the_prompt_blocks(llm_tiny):
    prompt = PROMPTS[2] * 6  # several full blocks
    params = SamplingParams(n=3, max_tokens=12, temperature=1.0, seed=11)
    (output,) = llm_tiny.generate(prompt, params)
    assert [c.index for c in output.outputs] == [0, 1, 2]
    assert all(c.finish_reason in ("stop", "length") for c in output.outputs)
    texts = {c.text for c in output.outputs}
    assert len(texts) > 1, "seeded choices draw different noise"
    # The same seed gives the same choices again.
    (again,) = llm_tiny.generate(prompt, params)
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in output.outputs]
    # Choice 1 and 2 reuse the blocks choice 0 computed.
    block = llm_tiny.engine.config.block_size
    queries = llm_tiny.engine.block_manager.prefix_cache_hits
    llm_tiny.generate(PROMPTS[3] * 6, SamplingParams(n=2, max_tokens=2, temperature=0))
    hits = llm_tiny.engine.block_manager.prefix_cache_hits - queries
    prompt_blocks = len(llm_tiny.engine.tokenizer.encode(PROMPTS[3] * 6)) // block
    assert hits >= prompt_blocks
    assert_no_leak(llm_tiny)


def test_aborting_a_request_with_held_choices_frees_everything(llm_tiny):
    engine = llm_tiny.engine
    engine.add_request(PROMPTS[0] * 10, SamplingParams(n=4, max_tokens=8), request_id="fan")
    engine.abort_request("fan")
    outputs = finish_all(llm_tiny)
    assert [o.finished for o in outputs] == [True]
    assert [c.finish_reason for c in outputs[0].outputs] == ["abort"] * 4
    assert_no_leak(llm_tiny)
