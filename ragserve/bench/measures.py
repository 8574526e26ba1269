"""From per-request client timings to the serving report: TTFT, TPOT, ITL and end-to-end
latency (mean, p50, p90, p99), request and token throughput, goodput under SLOs, rejections.

Definitions (as in vLLM's benchmark): TTFT is the time to the first streamed text; TPOT is
(E2E - TTFT) / (output tokens - 1) per request; ITL is the gap between consecutive streamed
chunks, pooled over requests; throughput counts completed requests over the run's wall time;
goodput counts those that met every SLO. Cancelled and rejected requests are counted apart and
never enter the latency figures.
"""

from collections import Counter
from dataclasses import dataclass

from ragserve.bench.client import RequestResult
from ragserve.reports import summary


@dataclass(frozen=True)
class Slo:
    """Latency objectives in milliseconds; None means no objective."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    @classmethod
    def parse(cls, items: list[str]) -> "Slo":
        """From NAME:MS items, e.g. ttft:1000 tpot:200."""
        values: dict[str, float] = {}
        for item in items:
            name, _, ms = item.partition(":")
            if name not in ("ttft", "tpot", "e2e") or not ms:
                raise ValueError(f"an SLO is ttft:MS, tpot:MS or e2e:MS, got {item!r}")
            values[f"{name}_ms"] = float(ms)
        return cls(**values)


def output_tokens(result: RequestResult) -> int:
    return result.output_tokens or len(result.token_times)


def request_latencies(result: RequestResult) -> dict[str, float]:
    """TTFT, TPOT and E2E of one request, in milliseconds."""
    first = result.token_times[0] if result.token_times else result.end
    ttft = (first - result.start) * 1000
    e2e = (result.end - result.start) * 1000
    tokens = output_tokens(result)
    tpot = (e2e - ttft) / (tokens - 1) if tokens > 1 else 0.0
    return {"ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e}


def meets(latencies: dict[str, float], slo: Slo) -> bool:
    limits = {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms, "e2e_ms": slo.e2e_ms}
    return all(limit is None or latencies[name] <= limit for name, limit in limits.items())


def summarize(results: list[RequestResult], duration_s: float, slo: Slo) -> dict:
    done = [r for r in results if r.ok]
    latencies = [request_latencies(r) for r in done]
    itl = [
        (later - earlier) * 1000
        for r in done
        for earlier, later in zip(r.token_times, r.token_times[1:], strict=False)
    ]
    good = sum(meets(latency, slo) for latency in latencies)
    rejected = Counter(str(r.status) for r in results if r.status not in (0, 200))
    out_tokens = sum(output_tokens(r) for r in done)
    in_tokens = sum(r.prompt_tokens for r in done)
    return {
        "requests": len(results),
        "completed": len(done),
        "cancelled": sum(r.cancelled for r in results),
        "failed": sum(r.status in (0, 200) and r.error is not None for r in results),
        "rejected": dict(rejected),
        # Why requests failed or were refused: the most frequent messages and their counts.
        "errors": dict(Counter(r.error for r in results if r.error is not None).most_common(5)),
        "duration_s": duration_s,
        "request_throughput": len(done) / duration_s,
        "output_token_throughput": out_tokens / duration_s,
        "total_token_throughput": (out_tokens + in_tokens) / duration_s,
        "goodput": good / duration_s,
        "goodput_share": good / len(done) if done else 0.0,
        "slo": slo.__dict__,
        "ttft_ms": summary([x["ttft_ms"] for x in latencies]),
        "tpot_ms": summary([x["tpot_ms"] for x in latencies]),
        "itl_ms": summary(itl),
        "e2e_ms": summary([x["e2e_ms"] for x in latencies]),
        "prompt_tokens_mean": in_tokens / len(done) if done else 0.0,
        "output_tokens_mean": out_tokens / len(done) if done else 0.0,
    }


def server_time_split(results: list[RequestResult]) -> dict[str, dict[str, float]]:
    """Where RAG requests spent their time, from the server's own timings (ms): retrieval,
    rerank, the citation/support check, and generation (the rest of the total)."""
    rows = [r.server_timings for r in results if r.ok and r.server_timings]
    split: dict[str, list[float]] = {"retrieval_ms": [], "rerank_ms": [], "check_ms": []}
    split["generation_ms"], split["total_ms"] = [], []
    for t in rows:
        parts = {name: t.get(name, 0.0) for name in ("retrieval_ms", "rerank_ms", "check_ms")}
        for name, value in parts.items():
            split[name].append(value)
        split["total_ms"].append(t.get("total_ms", 0.0))
        split["generation_ms"].append(max(0.0, t.get("total_ms", 0.0) - sum(parts.values())))
    return {name: summary(values) for name, values in split.items()}
