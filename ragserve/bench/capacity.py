"""The capacity model of one replica: from its profile (KV pool, prefill rate, decode step time
by batch size) and a workload's token lengths, the concurrency it holds, its throughput and
latencies at each concurrency, the best operating point within latency objectives, and the
replicas a target request rate needs.

A running request holds its prompt and the output so far in KV blocks: on average over its life,
prompt + output/2 tokens, rounded up to whole blocks, which bounds the concurrency the pool holds
(and max_num_seqs bounds it too). At concurrency b the engine alternates decode steps of b
sequences (t(b) seconds each, one token per sequence) with prefill chunks; one request costs its
prefill, prompt / prefill_rate, plus its share of the decode steps, output × t(b) / b. So a
replica kept at b completes 1 / (prefill + output × t(b) / b) requests per second, and spends
the share rate × prefill of its time on prefill. A sequence's time per output token is t(b)
stretched by the prefills of the other b - 1 requests that land during its decode: t(b) / (1 -
share × (b - 1) / b). A new request's first token comes after its prefill, whose chunks each
share a step with the decodes, plus the wait behind prefills already queued: prefills arrive at
about random times and take a fixed time, so the wait is an M/D/1 queue's,
share × prefill / (2 × (1 - share)). Requests that all start and end together (equal output
lengths) queue longer than that.
"""

import itertools
import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ragserve.bench.measures import Slo

if TYPE_CHECKING:
    from ragserve.bench.workload import WorkloadOptions

# Requests drawn from a workload to measure its mean token lengths.
LENGTH_SAMPLE = 500


@dataclass(frozen=True)
class EngineProfile:
    """One replica as measured (capacity_profile.py) or saved from an earlier measurement."""

    model: str
    dtype: str
    kv_bytes_per_token: int
    kv_tokens: int
    block_size: int
    max_num_seqs: int
    chunk_tokens: int  # max_num_batched_tokens: the prefill chunk
    prefill_tokens_per_s: float
    # Seconds per decode step by batch size, measured at context_tokens of context per sequence.
    decode_step_s: dict[int, float]
    context_tokens: int
    measured_at: str = ""

    def __post_init__(self) -> None:
        if not self.decode_step_s or min(self.decode_step_s) < 1:
            raise ValueError("a profile needs decode step times for batch sizes from 1 up")
        if self.prefill_tokens_per_s <= 0 or any(t <= 0 for t in self.decode_step_s.values()):
            raise ValueError("a profile's rates and step times must be positive")

    def step_time(self, batch: int) -> float:
        """Decode step time at a batch size: linear between measured sizes, extended past the
        largest along the last measured slope (a step is compute-bound there)."""
        sizes = sorted(self.decode_step_s)
        if batch <= sizes[0]:
            return self.decode_step_s[sizes[0]]
        for low, high in itertools.pairwise(sizes):
            if batch <= high:
                share = (batch - low) / (high - low)
                return self.decode_step_s[low] + share * (
                    self.decode_step_s[high] - self.decode_step_s[low]
                )
        if len(sizes) == 1:
            return self.decode_step_s[sizes[0]] * batch / sizes[0]
        low, high = sizes[-2], sizes[-1]
        slope = (self.decode_step_s[high] - self.decode_step_s[low]) / (high - low)
        return self.decode_step_s[high] + slope * (batch - high)

    def as_json(self) -> dict:
        return asdict(self) | {"decode_step_s": {str(b): t for b, t in self.decode_step_s.items()}}

    @classmethod
    def from_json(cls, data: dict) -> "EngineProfile":
        steps = {int(b): float(t) for b, t in data["decode_step_s"].items()}
        return cls(**(data | {"decode_step_s": steps}))


@dataclass(frozen=True)
class Lengths:
    """A workload's mean prompt and output lengths in tokens."""

    prompt: float
    output: float

    def __post_init__(self) -> None:
        if self.prompt < 1 or self.output < 1:
            raise ValueError("mean prompt and output lengths must be at least one token")


def workload_lengths(workload: "WorkloadOptions", seed: int) -> Lengths:
    """The workload's mean prompt and output tokens, over LENGTH_SAMPLE of its requests."""
    specs = workload.dataset.requests(workload.text(seed), LENGTH_SAMPLE)
    return Lengths(
        sum(s.prompt_tokens for s in specs) / len(specs),
        sum(s.output_tokens for s in specs) / len(specs),
    )


@dataclass(frozen=True)
class OperatingPoint:
    concurrency: int
    requests_per_s: float
    output_tokens_per_s: float
    prefill_share: float
    ttft_s: float
    tpot_s: float
    e2e_s: float

    def meets(self, slo: Slo) -> bool:
        figures = {"ttft_ms": self.ttft_s, "tpot_ms": self.tpot_s, "e2e_ms": self.e2e_s}
        return all(
            limit is None or figures[name] * 1000 <= limit for name, limit in asdict(slo).items()
        )


def kv_concurrency(profile: EngineProfile, lengths: Lengths) -> int:
    """How many requests of these lengths the KV pool holds at once (at least 1)."""
    resident = lengths.prompt + lengths.output / 2
    blocks = math.ceil(resident / profile.block_size)
    held = profile.kv_tokens // (blocks * profile.block_size)
    return max(1, min(profile.max_num_seqs, held))


def operating_point(profile: EngineProfile, lengths: Lengths, concurrency: int) -> OperatingPoint:
    step = profile.step_time(concurrency)
    prefill = lengths.prompt / profile.prefill_tokens_per_s
    rate = 1.0 / (prefill + lengths.output * step / concurrency)
    prefill_share = rate * prefill
    others = prefill_share * (concurrency - 1) / concurrency
    tpot = step / (1.0 - others)
    queued = prefill_share * prefill / (2.0 * (1.0 - prefill_share))
    ttft = prefill + queued + math.ceil(lengths.prompt / profile.chunk_tokens) * step
    return OperatingPoint(
        concurrency,
        rate,
        rate * lengths.output,
        prefill_share,
        ttft,
        tpot,
        ttft + (lengths.output - 1) * tpot,
    )


@dataclass(frozen=True)
class CapacityPlan:
    kv_concurrency: int
    points: list[OperatingPoint]  # concurrency 1 .. kv_concurrency
    best: OperatingPoint | None  # the highest request rate within the SLOs
    target_rate: float | None
    replicas: int | None  # for target_rate at the best point

    def as_json(self) -> dict:
        return asdict(self)


def plan(
    profile: EngineProfile, lengths: Lengths, slo: Slo, target_rate: float | None = None
) -> CapacityPlan:
    if target_rate is not None and target_rate <= 0:
        raise ValueError("the target request rate must be positive")
    limit = kv_concurrency(profile, lengths)
    points = [operating_point(profile, lengths, b) for b in range(1, limit + 1)]
    within = [p for p in points if p.meets(slo)]
    best = max(within, key=lambda p: p.requests_per_s) if within else None
    replicas = None
    if target_rate is not None and best is not None:
        replicas = math.ceil(target_rate / best.requests_per_s)
    return CapacityPlan(limit, points, best, target_rate, replicas)
