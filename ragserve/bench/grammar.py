"""`ragserve bench grammar`: what structured output costs the engine per step: compiling a
constraint, and filling and applying the token masks of a batch of constrained sequences."""

import json
import statistics
import time

import torch
from transformers import AutoTokenizer

from ragserve.bench.load_options import CONSTRAINED_FORMAT
from ragserve.engine.loader import resolve_model
from ragserve.engine.structured import Grammars, OutputConstraint, mask_logits

# What the constrained sequences have written when the masks are measured: inside a string,
# where most steps of a JSON answer are.
WRITTEN = '{"topic": "harbours", "note": "The crane was repaired in'


def measure(model: str, batches: list[int], repeats: int = 30) -> dict[str, object]:
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(model))
    vocab = len(tokenizer)
    started = time.perf_counter()
    grammars = Grammars(tokenizer, vocab, {tokenizer.eos_token_id})
    tokenizer_s = time.perf_counter() - started
    constraint = OutputConstraint("json", json.dumps(CONSTRAINED_FORMAT["json_schema"]["schema"]))
    started = time.perf_counter()
    grammars.compile(constraint)
    compile_s = time.perf_counter() - started
    written = tokenizer.encode(WRITTEN, add_special_tokens=False)
    per_batch = {}
    for batch in batches:
        matchers = [grammars.matcher(constraint) for _ in range(batch)]
        for matcher in matchers:
            matcher.consume_tokens(written)
        logits = torch.randn(batch, vocab)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            mask_logits(logits, list(matchers))
            times.append(time.perf_counter() - started)
        per_batch[batch] = round(statistics.median(times) * 1000, 3)
    return {
        "model": model,
        "vocab": vocab,
        "tokenizer_load_ms": round(tokenizer_s * 1000, 1),
        "json_schema_compile_ms": round(compile_s * 1000, 2),
        "mask_ms_by_batch": per_batch,
    }
