"""What structured output costs the engine per step (`ragserve bench grammar`): compiling a
constraint, and filling and applying the token masks of a batch of constrained sequences."""

import json
import statistics
import time

from ragserve.bench.jobs import CONSTRAINED_FORMAT

# What the constrained sequences have written when the masks are measured: inside a string,
# where most steps of a JSON answer are.
WRITTEN = '{"topic": "harbours", "note": "The crane was repaired in'


def measure(model: str, batches: list[int], repeats: int = 30) -> dict[str, object]:
    import torch
    from transformers import AutoTokenizer

    from ragserve.engine.kernels import extension
    from ragserve.engine.loader import resolve_model
    from ragserve.engine.structured import Grammars, OutputConstraint, apply_masks, fill_masks

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
        fills, applies = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            masks = fill_masks(list(matchers), vocab)
            filled = time.perf_counter()
            assert masks is not None
            apply_masks(logits, masks)
            fills.append(filled - started)
            applies.append(time.perf_counter() - filled)
        per_batch[batch] = {
            "fill": round(statistics.median(fills) * 1000, 3),
            "apply": round(statistics.median(applies) * 1000, 3),
        }
    return {
        "model": model,
        "vocab": vocab,
        "tokenizer_load_ms": round(tokenizer_s * 1000, 1),
        "json_schema_compile_ms": round(compile_s * 1000, 2),
        "mask_ms_by_batch": per_batch,
        "kernels": "C++" if extension() is not None else "PyTorch",
    }
