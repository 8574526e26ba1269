"""The engine on the real default model (SmolLM2-135M-Instruct)."""

import itertools

import pytest
import torch

from ragserve import LLM, SamplingParams
from ragserve.engine.errors import InvalidRequestError
from tests.engine.helpers import GREEDY, PROMPTS, assert_no_leak, finish_all


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


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "int8"])
def test_bfloat16_stays_close_to_float32(llm_fp32, kv_cache_dtype):
    budget = 1024 * 23040  # 1,024 tokens of bfloat16 keys and values
    bf16 = LLM(dtype="bfloat16", kv_cache_dtype=kv_cache_dtype, kv_cache_memory_bytes=budget)
    # An int8 cache: a byte an element and a float32 scale per position and kv head.
    expected_tokens = 1024 if kv_cache_dtype == "auto" else budget // (2 * 30 * 3 * (64 + 4))
    assert abs(bf16.engine.kv_cache.num_tokens - expected_tokens) < 16
    agree = 0
    for prompt in PROMPTS:
        ref = llm_fp32.generate(prompt, GREEDY)[0].outputs[0].token_ids
        got = bf16.generate(prompt, GREEDY)[0].outputs[0].token_ids
        agree += next(
            (i for i, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), len(ref)
        )
    # Greedy paths drift apart after a near tie; on average they agree for most of the way.
    assert agree / len(PROMPTS) >= 12
    assert_no_leak(bf16)


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
