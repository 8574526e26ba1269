"""The soak's checks, each a row with its figure, from the per-request results and the server's
gauges (ragserve/reliability/soak.py runs the load):

- no 5xx (the 503 of a full queue is a refusal, not an error) and no broken stream;
- every refusal a 429 or 503 with Retry-After, answered in under 50 ms at p99;
- resident memory grows less than 5% after the warm-up: the median of the load's last quarter
  after the warm-up against that of its first quarter, so that a leak shows and a passing peak
  does not;
- the queue drains within twice the time the capacity needs for the requests in flight when the
  load stops, plus 10 s (the server works off its backlog at no less than half its capacity),
  or within a given limit;
- KV usage reads 0 once idle.
"""

import math
import statistics
from collections import Counter
from dataclasses import dataclass

from ragserve.bench.client import RequestResult
from ragserve.reports import summary

REJECTION_P99_MS = 50.0
MEMORY_GROWTH = 0.05
DRAIN_SLACK = 2.0
DRAIN_GRACE_S = 10.0
# After the last response, how long the server may take to report nothing running or waiting;
# past it, the queue has not drained.
IDLE_WAIT_S = 60.0
# The share of the capacity run's requests that may be refused (a per-user limit met by chance
# as round-robin keys drift): a few leave its rate sound.
CAPACITY_REFUSALS = 0.1
MIB = 2**20


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    measured: str
    limit: str


def sustained_rate(results: list[RequestResult], mean_output_tokens: float) -> dict[str, float]:
    """The request rate a closed loop's results show while all its slots were busy."""
    refused = sum(r.status not in (0, 200) for r in results)
    if refused > CAPACITY_REFUSALS * len(results):
        # Each refusal frees its slot at once; many mean the loop ran over the server's limits,
        # burnt through its jobs and closed its window before it measured much.
        raise ValueError(
            f"the server refused {refused} of the capacity run's {len(results)} requests: "
            "lower --capacity-concurrency under its limits, or give --capacity"
        )
    begin = min(r.start for r in results)
    end = max(r.start for r in results)
    tokens = sum(t <= end for r in results for t in r.token_times)
    if end <= begin or tokens == 0:
        raise ValueError(
            "the capacity run streamed nothing while all its slots were busy: give --capacity, "
            "or more --capacity-requests than --capacity-concurrency"
        )
    per_s = tokens / (end - begin)
    return {
        "measured": True,
        "window_s": end - begin,
        "output_tokens_per_s": per_s,
        "mean_output_tokens": mean_output_tokens,
        "requests_per_s": per_s / mean_output_tokens,
    }


def error_check(results: list[RequestResult]) -> Check:
    server = sum(r.status >= 500 and r.status != 503 for r in results)
    broken = sum(r.status == 200 and r.error is not None for r in results)
    unanswered = sum(r.status == 0 for r in results)
    return Check(
        "no 5xx (but a full queue's 503), no broken stream",
        server + broken + unanswered == 0,
        f"{server} 5xx, {broken} broken, {unanswered} unanswered of {len(results)} requests",
        "0",
    )


def refusal_figures(results: list[RequestResult]) -> dict:
    """The refusals (4xx, and the 503 of a full queue): how many of each status, how many came
    without Retry-After or with another status than 429 or 503, and how fast they came."""
    refused = [r for r in results if 400 <= r.status < 500 or r.status == 503]
    return {
        "count": len(refused),
        "by_status": {str(s): n for s, n in sorted(Counter(r.status for r in refused).items())},
        "wrong": sum(r.status not in (429, 503) or r.retry_after is None for r in refused),
        "latency_ms": {
            **summary([(r.end - r.start) * 1000 for r in refused]),
            "max": max(((r.end - r.start) * 1000 for r in refused), default=math.nan),
        },
    }


def refusal_checks(refusals: dict) -> list[Check]:
    by_status = ", ".join(f"{n} × {status}" for status, n in refusals["by_status"].items())
    latency = refusals["latency_ms"]
    p99 = latency["p99"]
    return [
        Check(
            "every refusal a 429 or 503 with Retry-After",
            refusals["wrong"] == 0,
            f"{refusals['count']} refusals ({by_status or 'none'}), {refusals['wrong']} otherwise",
            "all",
        ),
        Check(
            "refusal latency p99",
            not refusals["count"] or p99 < REJECTION_P99_MS,
            f"{p99:.1f} ms (p50 {latency['p50']:.1f}, max {latency['max']:.1f})"
            if refusals["count"]
            else "no refusals",
            f"< {REJECTION_P99_MS:.0f} ms",
        ),
    ]


def memory_figures(timeline: list[dict[str, float]], warmup_s: float, load_s: float) -> dict:
    """Resident memory in the first and last quarters of the load after the warm-up; empty
    when the server does not report it there."""
    samples = [
        (p["t"], p["rss_bytes"])
        for p in timeline
        if warmup_s <= p["t"] <= load_s and math.isfinite(p.get("rss_bytes", math.nan))
    ]
    quarter = (load_s - warmup_s) / 4
    first = [v for t, v in samples if t <= warmup_s + quarter]
    last = [v for t, v in samples if t >= load_s - quarter]
    if not first or not last:
        return {}
    baseline, final = statistics.median(first), statistics.median(last)
    return {
        "baseline_bytes": baseline,
        "final_bytes": final,
        "peak_bytes": max(v for _, v in samples),
        "growth": final / baseline - 1,
        "samples": len(samples),
    }


def memory_check(memory: dict) -> Check:
    name, limit = "resident memory growth after warm-up", f"< {MEMORY_GROWTH:.0%}"
    if not memory:
        return Check(name, False, "not reported (process_resident_memory_bytes)", limit)
    return Check(
        name,
        memory["growth"] < MEMORY_GROWTH,
        f"{memory['growth']:+.1%} ({memory['baseline_bytes'] / MIB:.0f} → "
        f"{memory['final_bytes'] / MIB:.0f} MiB, peak {memory['peak_bytes'] / MIB:.0f})",
        limit,
    )


def drain_figures(
    results: list[RequestResult],
    settled: dict[str, float],
    capacity: float,
    drain_limit_s: float | None,
) -> dict[str, float]:
    """Seconds from the last request sent until the server was idle, and the bound on it: the
    requests then in flight served at half the capacity (req/s), unless drain_limit_s."""
    last_sent = max(r.start for r in results)
    in_flight = sum(r.end > last_sent for r in results)
    if drain_limit_s is None:
        drain_limit_s = DRAIN_SLACK * in_flight / capacity + DRAIN_GRACE_S
    return {
        "drain_s": max(r.end for r in results) - last_sent + settled["idle_wait_s"],
        "in_flight": in_flight,
        "bound_s": drain_limit_s,
        **{k: settled[k] for k in ("drained", "running", "waiting", "kv_cache_usage")},
    }


def drain_checks(drain: dict[str, float]) -> list[Check]:
    queue = (drain["running"], drain["waiting"])
    if not all(math.isfinite(v) for v in queue):
        measured = "not reported (num_requests_running, num_requests_waiting)"
    elif drain["drained"]:
        measured = f"{drain['drain_s']:.1f} s"
    else:
        measured = f"{queue[0]:.0f} running, {queue[1]:.0f} waiting {IDLE_WAIT_S:.0f} s after"
    kv = drain["kv_cache_usage"]
    return [
        Check(
            "queue drained after the load",
            all(math.isfinite(v) for v in queue)
            and bool(drain["drained"])
            and drain["drain_s"] <= drain["bound_s"],
            measured,
            f"≤ {drain['bound_s']:.1f} s ({drain['in_flight']:.0f} in flight)",
        ),
        Check(
            "KV usage once idle",
            kv == 0,
            f"{kv:.3f}" if math.isfinite(kv) else "not reported (kv_cache_usage_perc)",
            "0",
        ),
    ]
