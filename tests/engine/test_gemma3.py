"""A second architecture from a package: Gemma 3 270M (chunk packages of one GGUF), greedy
token for token against transformers' float32 model, on prompts shorter and longer than its
sliding window (512 positions), so both kinds of layer and both attention paths are checked."""

import pytest
import torch

from ragserve import LLM, SamplingParams
from ragserve.engine.loader import resolve_model

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    " ".join(f"item{i}" for i in range(400)),  # about 1,500 tokens: past the window
]


@pytest.fixture(scope="module")
def gemma():
    path = resolve_model("gemma-3-270m")
    # 18 layers x (key, value) x 1 KV head x 256 x 4 bytes per token, 2,048 tokens.
    return path, LLM("gemma-3-270m", "float32", kv_cache_memory_bytes=2048 * 18 * 2 * 256 * 4)


def test_greedy_matches_transformers(gemma):
    from transformers import AutoModelForCausalLM

    path, llm = gemma
    tokenizer = llm.get_tokenizer()
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    params = SamplingParams(max_tokens=16, temperature=0)
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            expected = reference.generate(ids, max_new_tokens=16, do_sample=False)
        (output,) = llm.generate([ids[0].tolist()], params)
        assert list(output.outputs[0].token_ids) == expected[0, ids.shape[1] :].tolist(), prompt
