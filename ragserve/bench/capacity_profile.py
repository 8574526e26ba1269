"""Measures a replica's EngineProfile on the engine itself: the prefill rate, and the decode step
time at each batch size with a given context per sequence.

Requests are greedy with EOS ignored, as `bench serve` sends them, with random token prompts
that share no prefix (the prefix cache is left out of the figures). The decode time is per
token of each sequence, so steps that accept draft tokens count as the tokens they produce.
"""

import datetime
import random
import statistics
import time

from ragserve.bench.capacity import EngineProfile
from ragserve.engine.engine import LLMEngine
from ragserve.engine.sampling_params import SamplingParams

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32)
# Small batches take a step of a few milliseconds, which other work on the machine easily
# disturbs: they are measured REPEATS times (the median counts) while their prompts stay short.
REPEATS = 3
REPEAT_TOKENS = 2048


class Profiler:
    def __init__(self, engine: LLMEngine, seed: int = 0) -> None:
        self.engine = engine
        self.rng = random.Random(seed)
        self.vocab = engine.model.spec.vocab_size

    def _prompt(self, length: int) -> list[int]:
        # Ids above the first thousand skip the special and byte tokens.
        return [self.rng.randrange(1000, self.vocab) for _ in range(length)]

    def _drain(self) -> None:
        while self.engine.has_unfinished_requests():
            self.engine.step()

    def prefill_rate(self, prompt_tokens: int, prompts: int = 2) -> float:
        """Prompt tokens per second of a few prompts prefilled together, chunked as the engine
        chunks them (their first tokens come out of the same steps)."""
        for _ in range(prompts):
            self.engine.add_request(self._prompt(prompt_tokens), SamplingParams(max_tokens=1))
        start = time.perf_counter()
        self._drain()
        return prompts * prompt_tokens / (time.perf_counter() - start)

    def decode_step(self, batch: int, context: int, steps: int) -> float:
        """Seconds per decode step of `batch` sequences each holding about `context` tokens."""
        params = SamplingParams(max_tokens=steps + 1, temperature=0, ignore_eos=True)
        ids = [self.engine.add_request(self._prompt(context), params) for _ in range(batch)]
        produced = dict.fromkeys(ids, 0)
        # Prefill every sequence and take its first token before the clock starts.
        while min(produced.values()) < 1:
            for output in self.engine.step():
                produced[output.request_id] = len(output.outputs[0].token_ids)
        start_tokens = sum(produced.values())
        start = time.perf_counter()
        while self.engine.has_unfinished_requests():
            for output in self.engine.step():
                produced[output.request_id] = len(output.outputs[0].token_ids)
        elapsed = time.perf_counter() - start
        tokens_per_sequence = (sum(produced.values()) - start_tokens) / batch
        return elapsed / tokens_per_sequence


def measure_profile(
    engine: LLMEngine,
    batches: tuple[int, ...] = DEFAULT_BATCHES,
    context: int = 512,
    steps: int = 32,
    seed: int = 0,
) -> EngineProfile:
    """The engine's profile; batch sizes past max_num_seqs or the KV pool are left out."""
    config = engine.config
    cache = engine.kv_cache
    context = min(context, engine.max_model_len - steps - 2)
    fits = [
        b
        for b in batches
        if b <= config.max_num_seqs
        and b * (context + steps + config.block_size) <= cache.num_tokens
    ]
    if not fits or fits[0] != 1:
        raise ValueError("the KV pool must hold at least one sequence of the profile's context")
    profiler = Profiler(engine, seed)
    profiler.decode_step(1, min(context, 64), 2)  # warm-up: kernels, allocator, caches
    prefill = profiler.prefill_rate(context)
    steps_by_batch = {
        b: statistics.median(
            profiler.decode_step(b, context, steps)
            for _ in range(REPEATS if b * context <= REPEAT_TOKENS else 1)
        )
        for b in fits
    }
    return EngineProfile(
        model=engine.model_id,
        dtype=config.dtype,
        kv_bytes_per_token=cache.nbytes // cache.num_tokens,
        kv_tokens=cache.num_tokens,
        block_size=config.block_size,
        max_num_seqs=config.max_num_seqs,
        chunk_tokens=config.max_num_batched_tokens,
        prefill_tokens_per_s=prefill,
        decode_step_s=steps_by_batch,
        context_tokens=context,
        measured_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )
