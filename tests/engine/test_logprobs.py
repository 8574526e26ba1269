"""Log-probabilities on the real default model: of each output token under the distribution it
was drawn from, and of each prompt token under the model (checked against transformers)."""

import pytest
import torch

from ragserve import LLM, SamplingParams
from tests.engine.helpers import PROMPTS


@pytest.fixture(scope="module")
def reference(default_model_path):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(default_model_path, dtype=torch.float32)

    def logits(token_ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return hf(torch.tensor([token_ids])).logits[0].float()

    return logits


def test_greedy_tokens_are_the_top_ones(llm_fp32):
    params = SamplingParams(max_tokens=3, temperature=0, logprobs=5)
    output = llm_fp32.generate(PROMPTS[0], params)[0].outputs[0]
    assert len(output.logprobs) == 3
    for token, position in zip(output.token_ids, output.logprobs, strict=True):
        assert len(position) == 5
        assert position[token].rank == 1
        assert position[token].logprob == max(p.logprob for p in position.values())
        assert sorted(p.rank for p in position.values()) == [1, 2, 3, 4, 5]
    plain = llm_fp32.generate(PROMPTS[0], SamplingParams(max_tokens=3, temperature=0))[0]
    assert plain.outputs[0].logprobs is None


def test_a_sampled_token_outside_the_top_n_is_still_reported(llm_fp32):
    params = SamplingParams(max_tokens=24, temperature=1.5, seed=7, logprobs=1)
    output = llm_fp32.generate(PROMPTS[1], params)[0].outputs[0]
    chosen = zip(output.token_ids, output.logprobs, strict=True)
    ranks = [position[token].rank for token, position in chosen]
    assert any(rank > 1 for rank in ranks), "temperature 1.5 should pick a second choice"
    for token, position in zip(output.token_ids, output.logprobs, strict=True):
        assert token in position
        assert len(position) == (1 if position[token].rank == 1 else 2)
    only_chosen = SamplingParams(max_tokens=4, temperature=0, logprobs=0)
    for position in llm_fp32.generate(PROMPTS[1], only_chosen)[0].outputs[0].logprobs:
        assert len(position) == 1


def test_logprobs_are_of_the_distribution_sampled_from(llm_fp32, reference):
    prompt = llm_fp32.engine.tokenizer.encode(PROMPTS[2])
    raw = reference(prompt)[-1]
    for temperature in (0.5, 1.0):
        params = SamplingParams(max_tokens=1, temperature=temperature, seed=3, logprobs=3)
        output = llm_fp32.generate({"prompt_token_ids": prompt}, params)[0].outputs[0]
        expected = torch.log_softmax(raw / temperature, dim=-1)
        for token, entry in output.logprobs[0].items():
            assert entry.logprob == pytest.approx(expected[token].item(), abs=1e-3)
    # A logit bias is part of that distribution: the banned token leaves the top.
    top = int(raw.argmax())
    banned = SamplingParams(max_tokens=1, temperature=0, logprobs=5, logit_bias={top: -100})
    position = llm_fp32.generate({"prompt_token_ids": prompt}, banned)[0].outputs[0].logprobs[0]
    assert top not in position


@pytest.mark.parametrize("chunk", [None, 16])
def test_prompt_logprobs_equal_transformers(reference, chunk):
    llm = LLM(
        dtype="float32",
        kv_cache_memory_bytes=2048 * 46080,
        max_num_batched_tokens=chunk or 2048,
    )
    prompt = llm.engine.tokenizer.encode(" ".join(PROMPTS[:3]))
    expected = torch.log_softmax(reference(prompt), dim=-1)
    params = SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=2)
    # Twice: the second run must not take the prompt from the prefix cache, which would
    # skip the logits the log-probabilities come from.
    for _ in range(2):
        output = llm.generate({"prompt_token_ids": prompt}, params)[0]
        assert output.num_cached_tokens == 0
        assert output.prompt_logprobs[0] is None
        assert len(output.prompt_logprobs) == len(prompt)
        for position, (token, entry) in enumerate(
            zip(prompt[1:], output.prompt_logprobs[1:], strict=True)
        ):
            want = expected[position, token].item()
            assert entry[token].logprob == pytest.approx(want, abs=1e-3)
            assert len(entry) in (2, 3)
            assert entry[token].rank == int((expected[position] > want).sum()) + 1


def test_prompt_logprobs_do_not_depend_on_the_batch_in_batch_invariant_mode():
    llm = LLM(dtype="bfloat16", kv_cache_memory_bytes=4096 * 46080, max_num_batched_tokens=64)
    params = SamplingParams(max_tokens=2, temperature=0, prompt_logprobs=1, batch_invariant=True)
    alone = llm.generate(PROMPTS[3], params)[0].prompt_logprobs
    together = llm.generate(PROMPTS, params)
    assert together[3].prompt_logprobs == alone
