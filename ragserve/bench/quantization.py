"""What a weight or KV cache format costs in quality, next to the decoding speed it buys
(`ragserve bench quantization`): each format (dtype, quantization and KV cache dtype) is an
engine of its own, compared with the float32 model.

- Perplexity: the bundled Wikipedia corpus' first articles, joined in order up to
  `text_tokens` tokens, teacher-forced through the model over the paged cache in prompt-sized
  chunks.
- Greedy agreement: the first 32 tokens of each of `prompts` further articles, continued
  greedily for `new_tokens`; per prompt, the share of tokens before the first one that differs
  from the float32 model's, and the share of prompts whose whole continuation is the same; for
  a quantized format (weights or KV cache), also the first share against its own dtype
  unquantized (when measured).
- Speed: one stream's draft-less decode step (p50) after a 200-token prompt.
"""

import statistics
import time
from dataclasses import dataclass

import torch

from ragserve.engine.attention import AttentionMetadata
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.engine.sampling_params import SamplingParams
from ragserve.rag.corpus import load_wiki

REFERENCE = ("float32", "none", "auto")
PROMPT_TOKENS = 32


@dataclass
class FormatQuality:
    dtype: str
    quantization: str
    kv_cache_dtype: str
    projection_mb: float
    perplexity: float
    perplexity_vs_float32: float
    tokens_agreeing: float
    prompts_identical: float
    # The same against this dtype's unquantized weights (None for those): what the rounding
    # itself changes, apart from the dtype's own difference from float32.
    tokens_agreeing_unquantized: float | None
    decode_step_ms: float


def perplexity(engine: LLMEngine, token_ids: list[int]) -> float:
    """exp of the mean negative log-likelihood of each token after the first, computed in
    chunks of max_num_batched_tokens positions, each attending to everything before it. Uses
    the KV pool's first blocks directly, so it runs on an engine that has served nothing."""
    block_size = engine.kv_cache.block_size
    blocks = torch.arange(-(-len(token_ids) // block_size))
    chunk = engine.config.max_num_batched_tokens
    total, count = 0.0, 0
    for start in range(0, len(token_ids) - 1, chunk):
        positions = torch.arange(start, min(start + chunk, len(token_ids) - 1))
        meta = AttentionMetadata(
            slot_blocks=blocks[positions // block_size],
            slot_offsets=positions % block_size,
            block_tables=blocks.unsqueeze(0),
            token_seqs=torch.zeros_like(positions),
            token_lens=positions + 1,
        )
        hidden = engine.model.forward(
            torch.tensor(token_ids)[positions], positions, meta, engine.runner.kv_layers
        )
        logprobs = torch.log_softmax(engine.model.logits(hidden), dim=-1)
        targets = torch.tensor(token_ids)[positions + 1]
        total -= float(logprobs.gather(1, targets.unsqueeze(1)).sum())
        count += len(positions)
    return float(torch.exp(torch.tensor(total / count)))


def greedy(engine: LLMEngine, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    params = SamplingParams(max_tokens=new_tokens, temperature=0, ignore_eos=True)
    ids = [engine.add_request(prompt, params) for prompt in prompts]
    done: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                done[output.request_id] = output.outputs[0].token_ids
    return [done[request_id] for request_id in ids]


def decode_step_ms(engine: LLMEngine, vocab_size: int, steps: int = 64) -> float:
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(1000, vocab_size, (200,), generator=generator).tolist()
    engine.add_request(prompt, SamplingParams(max_tokens=steps, temperature=0, ignore_eos=True))
    times = []
    while engine.has_unfinished_requests():
        started = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - started)
    return statistics.median(times[2:]) * 1e3


def agreement(outputs: list[list[int]], reference: list[list[int]]) -> tuple[float, float]:
    """(mean share of tokens before the first difference, share of identical outputs)."""
    prefixes = []
    for got, want in zip(outputs, reference, strict=True):
        same = next(
            (i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), len(want)
        )
        prefixes.append(same / len(want))
    return statistics.mean(prefixes), statistics.mean(p == 1.0 for p in prefixes)


def measure(
    model: str,
    formats: list[tuple[str, str, str]],
    text_tokens: int = 2048,
    prompts: int = 64,
    new_tokens: int = 32,
) -> list[FormatQuality]:
    """The float32 model first (the reference), then each (dtype, quantization, KV cache dtype)
    in formats."""
    articles = load_wiki(limit=400)
    results: list[FormatQuality] = []
    reference: tuple[float, list[list[int]]] | None = None
    continuations: dict[str, list[list[int]]] = {}
    for dtype, quantization, kv_cache_dtype in [REFERENCE, *[f for f in formats if f != REFERENCE]]:
        config = EngineConfig(
            model=model,
            dtype=dtype,
            quantization=quantization,
            kv_cache_dtype=kv_cache_dtype,
            speculative_tokens=0,
        )
        engine = LLMEngine(config)
        tokenizer = engine.tokenizer
        text: list[int] = []
        for article in articles:
            if len(text) >= text_tokens:
                break
            text += tokenizer.encode(article.text + "\n\n", add_special_tokens=False)
        starts = [
            tokenizer.encode(article.text, add_special_tokens=False)[:PROMPT_TOKENS]
            for article in articles[-prompts:]
        ]
        ppl = perplexity(engine, text[:text_tokens])
        outputs = greedy(engine, starts, new_tokens)
        if reference is None:
            reference = (ppl, outputs)
        agreeing, identical = agreement(outputs, reference[1])
        rounded = quantization != "none" or kv_cache_dtype != "auto"
        if not rounded:
            continuations[dtype] = outputs
        unquantized = continuations.get(dtype) if rounded else None
        results.append(
            FormatQuality(
                dtype=dtype,
                quantization=quantization,
                kv_cache_dtype=kv_cache_dtype,
                projection_mb=sum(
                    p.weight.nbytes + (p.scale.nbytes if p.scale is not None else 0)
                    for p in engine.model.projections()
                )
                / 2**20,
                perplexity=ppl,
                perplexity_vs_float32=ppl / reference[0],
                tokens_agreeing=agreeing,
                prompts_identical=identical,
                tokens_agreeing_unquantized=(
                    agreement(outputs, unquantized)[0] if unquantized is not None else None
                ),
                decode_step_ms=decode_step_ms(engine, engine.model.spec.vocab_size),
            )
        )
        del engine
    return results


def to_markdown(model: str, results: list[FormatQuality]) -> str:
    lines = [
        f"# Weight and KV cache formats of {model} against float32",
        "",
        "| dtype | quantization | KV cache | projections MiB | perplexity | vs float32 |"
        " tokens agreeing | prompts identical | tokens agreeing with the dtype unquantized |"
        " decode step p50 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        own = r.tokens_agreeing_unquantized
        lines.append(
            f"| {r.dtype} | {r.quantization} | {r.kv_cache_dtype} | {r.projection_mb:.0f} "
            f"| {r.perplexity:.3f} | "
            f"{r.perplexity_vs_float32:.4f} | {r.tokens_agreeing:.3f} | {r.prompts_identical:.3f} "
            f"| {'-' if own is None else f'{own:.3f}'} "
            f"| {r.decode_step_ms:.2f} |"
        )
    return "\n".join(lines) + "\n"
