"""The engine on the real default model (SmolLM2-135M-Instruct)."""

import itertools

import pytest
import torch

from ragserve import LLM, SamplingParams
from ragserve.engine.errors import EngineOverloadedError, InvalidRequestError

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three laws of thermodynamics are",
    "List of prime numbers: 2, 3, 5,",
]
GREEDY = SamplingParams(max_tokens=32, temperature=0)


def finish_all(llm: LLM) -> list:
    outputs = []
    while llm.engine.has_unfinished_requests():
        outputs.extend(llm.engine.step())
    return outputs


def assert_no_leak(llm: LLM) -> None:
    stats = llm.engine.stats()
    assert stats.num_running == 0 and stats.num_waiting == 0
    assert stats.kv_blocks_free == stats.kv_blocks_total
    assert all(b.ref_count == 0 for b in llm.engine.block_manager.blocks)


def test_greedy_matches_transformers(llm_fp32, default_model_path):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(default_model_path, dtype=torch.float32)
    outputs = llm_fp32.generate(PROMPTS, GREEDY)
    for output in outputs:
        ids = torch.tensor([output.prompt_token_ids])
        reference = hf.generate(ids, max_new_tokens=32, do_sample=False)[0, ids.shape[1] :]
        assert output.outputs[0].token_ids == reference.tolist(), output.prompt
    assert_no_leak(llm_fp32)


def test_mixed_batch_equals_alone(llm_fp32):
    together = llm_fp32.generate(PROMPTS, GREEDY)
    for prompt, batched in zip(PROMPTS, together, strict=True):
        alone = llm_fp32.generate(prompt, GREEDY)[0]
        assert alone.outputs[0].token_ids == batched.outputs[0].token_ids


def test_chunked_prefill_gives_the_same_output():
    # Without drafts, so that every step counted below is a prefill chunk or one decode.
    chunked = LLM(
        dtype="float32",
        kv_cache_memory_bytes=2048 * 46080,
        max_num_batched_tokens=16,
        speculative_tokens=0,
    )
    prompt = " ".join(PROMPTS * 2)
    out = chunked.generate(prompt, GREEDY)[0]
    assert len(out.prompt_token_ids) > 3 * 16, "the prompt must need several chunks"
    assert chunked.engine.step_times.steps > 32
    whole = LLM(dtype="float32", kv_cache_memory_bytes=2048 * 46080)
    assert whole.generate(prompt, GREEDY)[0].outputs[0].token_ids == out.outputs[0].token_ids


def test_prefix_cache_hits_within_tenant_only(llm_fp32):
    engine = llm_fp32.engine
    prefix = list(range(1000, 1064))
    params = SamplingParams(max_tokens=4, temperature=0)
    engine.add_request([*prefix, 5, 6, 7], params, cache_salt="tenant-a", request_id="p1")
    finish_all(llm_fp32)
    engine.add_request([*prefix, 8, 9], params, cache_salt="tenant-a", request_id="p2")
    engine.add_request([*prefix, 8, 9], params, cache_salt="tenant-b", request_id="p3")
    outputs = {o.request_id: o for o in finish_all(llm_fp32) if o.finished}
    assert outputs["p2"].num_cached_tokens >= 48
    assert outputs["p3"].num_cached_tokens == 0
    assert_no_leak(llm_fp32)


def test_abort_frees_blocks(llm_fp32):
    engine = llm_fp32.engine
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
    assert_no_leak(llm_fp32)


def test_preemption_keeps_greedy_output():
    # 8 blocks of 16 tokens: three 40-token sequences cannot all grow to 72 tokens.
    small = LLM(dtype="float32", kv_cache_memory_bytes=8 * 16 * 46080, output_reserve_tokens=0)
    prompts = [f"{p} {p}" for p in PROMPTS[:3]]
    params = SamplingParams(max_tokens=32, temperature=0, ignore_eos=True)
    together = small.generate(prompts, params)
    assert small.engine.stats().num_preemptions > 0
    assert any(o.metrics.num_preemptions for o in together)
    for prompt, output in zip(prompts, together, strict=True):
        alone = small.generate(prompt, params)[0]
        assert alone.outputs[0].token_ids == output.outputs[0].token_ids
    assert_no_leak(small)


def test_impossible_requests_are_rejected_at_once(llm_fp32):
    engine = llm_fp32.engine
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


def test_pool_bounds_max_model_len():
    tiny = LLM(dtype="float32", kv_cache_memory_bytes=4 * 16 * 46080)
    assert tiny.engine.max_model_len == 64
    with pytest.raises(InvalidRequestError):
        tiny.engine.add_request(list(range(100, 160)), SamplingParams(max_tokens=10))


def test_queue_limit_rejects_with_overload(llm_fp32):
    engine = llm_fp32.engine
    limit = engine.config.max_queued_requests
    engine.config.max_queued_requests = 2
    try:
        engine.add_request("a b c", GREEDY)
        engine.add_request("d e f", GREEDY)
        with pytest.raises(EngineOverloadedError):
            engine.add_request("g h i", GREEDY)
    finally:
        engine.config.max_queued_requests = limit
    finish_all(llm_fp32)


def test_seeded_sampling_is_reproducible(llm_fp32):
    params = SamplingParams(max_tokens=24, temperature=1.0, top_p=0.9, top_k=50, seed=1234)
    first = llm_fp32.generate([PROMPTS[2]] * 2, params)
    again = llm_fp32.generate(PROMPTS[2], params)[0]
    other = llm_fp32.generate(PROMPTS[2], SamplingParams(max_tokens=24, temperature=1.0, seed=9))
    assert first[0].outputs[0].token_ids == first[1].outputs[0].token_ids
    assert first[0].outputs[0].token_ids == again.outputs[0].token_ids
    assert other[0].outputs[0].token_ids != again.outputs[0].token_ids


def test_top_k_one_is_greedy(llm_fp32):
    sampled = llm_fp32.generate(PROMPTS[0], SamplingParams(max_tokens=16, top_k=1, seed=3))
    greedy = llm_fp32.generate(PROMPTS[0], SamplingParams(max_tokens=16, temperature=0))
    assert sampled[0].outputs[0].token_ids == greedy[0].outputs[0].token_ids


def test_stop_strings_and_stop_tokens(llm_fp32):
    full = llm_fp32.generate(PROMPTS[4], SamplingParams(max_tokens=24, temperature=0))[0]
    assert "11" in full.outputs[0].text
    stopped = llm_fp32.generate(
        PROMPTS[4], SamplingParams(max_tokens=24, temperature=0, stop=["11"])
    )[0]
    completion = stopped.outputs[0]
    assert completion.finish_reason == "stop" and completion.stop_reason == "11"
    assert completion.text == full.outputs[0].text.split("11")[0]
    first_token = full.outputs[0].token_ids[2]
    by_token = llm_fp32.generate(
        PROMPTS[4], SamplingParams(max_tokens=24, temperature=0, stop_token_ids=[first_token])
    )[0]
    assert by_token.outputs[0].token_ids[-1] == first_token
    assert by_token.outputs[0].stop_reason == first_token


def test_streamed_text_is_incremental_and_complete(llm_fp32):
    engine = llm_fp32.engine
    accepted_before = engine.stats().spec_decode_accepted_tokens
    engine.add_request(PROMPTS[2], SamplingParams(max_tokens=30, temperature=0), "stream")
    texts = [o.outputs[0].text for o in finish_all(llm_fp32) if o.request_id == "stream"]
    # One output per step; a step that accepts draft tokens brings them in one output.
    accepted = engine.stats().spec_decode_accepted_tokens - accepted_before
    assert len(texts) >= 30 - accepted
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(texts))
    final = texts[-1]
    tokenizer = llm_fp32.get_tokenizer()
    ids = llm_fp32.generate(PROMPTS[2], SamplingParams(max_tokens=30, temperature=0))[0]
    assert final == tokenizer.decode(ids.outputs[0].token_ids, skip_special_tokens=True)


def test_chat_applies_template_and_stops_at_end_of_turn(llm_fp32):
    output = llm_fp32.chat(
        [{"role": "user", "content": "What is the capital of France?"}],
        SamplingParams(max_tokens=40, temperature=0),
    )[0]
    assert "<|im_start|>assistant" in output.prompt
    assert "Paris" in output.outputs[0].text
    assert output.outputs[0].finish_reason == "stop"


def test_request_metrics(llm_fp32):
    output = llm_fp32.generate(PROMPTS[0], GREEDY)[0]
    metrics = output.metrics
    assert metrics.queue_time is not None and metrics.queue_time >= 0
    assert metrics.time_to_first_token >= metrics.queue_time
    assert metrics.finished_time >= metrics.first_token_time


def test_bfloat16_stays_close_to_float32(llm_fp32):
    bf16 = LLM(dtype="bfloat16", kv_cache_memory_bytes=1024 * 23040)
    agree = 0
    for prompt in PROMPTS:
        ref = llm_fp32.generate(prompt, GREEDY)[0].outputs[0].token_ids
        got = bf16.generate(prompt, GREEDY)[0].outputs[0].token_ids
        agree += next(
            (i for i, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), len(ref)
        )
    # Greedy paths drift apart after a near tie; on average they agree for most of the way.
    assert agree / len(PROMPTS) >= 12


def test_logprobs_of_the_top_tokens(llm_fp32):
    output = llm_fp32.generate(PROMPTS[0], SamplingParams(max_tokens=3, temperature=0, logprobs=5))[
        0
    ].outputs[0]
    assert len(output.logprobs) == 3
    for token, top in zip(output.token_ids, output.logprobs, strict=True):
        assert len(top) == 5
        assert max(top, key=top.get) == token
        assert all(v <= 0 for v in top.values())
    plain = llm_fp32.generate(PROMPTS[0], SamplingParams(max_tokens=3, temperature=0))[0]
    assert plain.outputs[0].logprobs is None


def test_n_choices_share_the_prompt_blocks(llm_fp32):
    prompt = PROMPTS[2] * 6  # several full blocks
    params = SamplingParams(n=3, max_tokens=12, temperature=1.0, seed=11)
    (output,) = llm_fp32.generate(prompt, params)
    assert [c.index for c in output.outputs] == [0, 1, 2]
    assert all(c.finish_reason in ("stop", "length") for c in output.outputs)
    texts = {c.text for c in output.outputs}
    assert len(texts) > 1, "seeded choices draw different noise"
    # The same seed gives the same choices again.
    (again,) = llm_fp32.generate(prompt, params)
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in output.outputs]
    # Choice 1 and 2 reuse the blocks choice 0 computed.
    block = llm_fp32.engine.config.block_size
    queries = llm_fp32.engine.block_manager.prefix_cache_hits
    llm_fp32.generate(PROMPTS[3] * 6, SamplingParams(n=2, max_tokens=2, temperature=0))
    hits = llm_fp32.engine.block_manager.prefix_cache_hits - queries
    prompt_blocks = len(llm_fp32.engine.tokenizer.encode(PROMPTS[3] * 6)) // block
    assert hits >= prompt_blocks
    assert_no_leak(llm_fp32)


def test_aborting_a_request_with_held_choices_frees_everything(llm_fp32):
    engine = llm_fp32.engine
    engine.add_request(PROMPTS[0] * 10, SamplingParams(n=4, max_tokens=8), request_id="fan")
    engine.abort_request("fan")
    outputs = finish_all(llm_fp32)
    assert [o.finished for o in outputs] == [True]
    assert [c.finish_reason for c in outputs[0].outputs] == ["abort"] * 4
    assert_no_leak(llm_fp32)


def test_min_tokens_holds_off_eos_and_stops(llm_fp32):
    eos = next(iter(llm_fp32.engine.eos_token_ids))
    # A bias that makes end-of-sequence the greedy choice at every step...
    ends_at_once = SamplingParams(max_tokens=20, temperature=0, logit_bias={eos: 100})
    assert llm_fp32.generate(PROMPTS[0], ends_at_once)[0].outputs[0].token_ids == [eos]
    # ...is held off until min_tokens tokens have been generated.
    held = SamplingParams(max_tokens=20, temperature=0, logit_bias={eos: 100}, min_tokens=5)
    tokens = llm_fp32.generate(PROMPTS[0], held)[0].outputs[0].token_ids
    assert len(tokens) == 6 and tokens[-1] == eos and eos not in tokens[:-1]


def test_logit_bias_forces_a_token(llm_fp32):
    token = llm_fp32.engine.tokenizer.encode(" banana")[0]
    params = SamplingParams(max_tokens=4, temperature=0, logit_bias={token: 100})
    assert llm_fp32.generate(PROMPTS[0], params)[0].outputs[0].token_ids == [token] * 4


def test_penalties_change_a_repetitive_continuation(llm_fp32):
    prompt = PROMPTS[4]
    plain = llm_fp32.generate(prompt, SamplingParams(max_tokens=24, temperature=0))
    tokens = plain[0].outputs[0].token_ids
    assert len(set(tokens)) < len(tokens), "the plain continuation repeats tokens"
    # (The presence penalty alone does not move this prompt's digits and commas; its
    # arithmetic is checked in test_logits_processor.)
    for penalty in ({"repetition_penalty": 1.8}, {"frequency_penalty": 2.0}):
        params = SamplingParams(max_tokens=24, temperature=0, **penalty)
        penalised = llm_fp32.generate(prompt, params)[0].outputs[0].token_ids
        assert penalised != tokens, penalty
        assert len(set(penalised)) / len(penalised) > len(set(tokens)) / len(tokens), penalty


def test_stop_string_can_be_kept_in_the_output(llm_fp32):
    greedy = llm_fp32.generate(PROMPTS[4], SamplingParams(max_tokens=16, temperature=0))
    text = greedy[0].outputs[0].text
    stop = text[4:7]
    dropped = SamplingParams(max_tokens=16, temperature=0, stop=stop)
    kept = SamplingParams(max_tokens=16, temperature=0, stop=stop, include_stop_str_in_output=True)
    assert llm_fp32.generate(PROMPTS[4], dropped)[0].outputs[0].text == text[: text.index(stop)]
    kept_text = llm_fp32.generate(PROMPTS[4], kept)[0].outputs[0].text
    assert kept_text == text[: text.index(stop) + len(stop)]


def test_logit_bias_outside_the_vocabulary_is_refused(llm_fp32):
    with pytest.raises(InvalidRequestError, match="logit_bias"):
        llm_fp32.engine.add_request([1, 2, 3], SamplingParams(logit_bias={10**9: 1.0}))
