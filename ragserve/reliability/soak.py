"""`ragserve bench soak`: a server held over its capacity for a long while, then checked.

Against a running server, with the keys taken round-robin (three tenants' in the documented run):

1. Capacity, unless given: a closed loop keeps `capacity_concurrency` requests of the workload in
   flight. The output tokens streamed while every slot was busy (from the first request's start
   to the last one's), per second, over the workload's mean output length, is the request rate
   the server sustains. The tail, when fewer and fewer requests are left, is left out: it would
   understate the rate.
2. Soak: Poisson arrivals at `overload` times that rate for `duration_s`, a share of the clients
   cancelling mid-stream; the server's gauges (resident memory, KV usage, running and waiting
   requests) read from /metrics every `sample_every_s`.
3. Drain: from the last request sent, how long until the server reports nothing running or
   waiting, and whether its KV cache is then empty.

The checks and their figures are in soak_checks.py.
"""

import asyncio
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from ragserve.bench.jobs import JobMaker
from ragserve.bench.load import LoadSettings, ServerProbe, nothing_queued
from ragserve.bench.measures import Slo
from ragserve.bench.serve import load_client, measured_run, runs_markdown
from ragserve.reliability.soak_checks import (
    IDLE_WAIT_S,
    MIB,
    drain_checks,
    drain_figures,
    error_check,
    memory_check,
    memory_figures,
    refusal_checks,
    refusal_figures,
    sustained_rate,
)
from ragserve.reports import markdown_table, run_metadata, run_section, write_report

# After the queue drained, how long the KV cache may take to read empty (blocks are freed at the
# next engine step).
KV_SETTLE_S = 5.0
# Jobs prepared beyond rate × duration, so that Poisson arrivals do not run out before the end.
JOB_MARGIN = 1.5


@dataclass(frozen=True)
class SoakSettings:
    duration_s: float = 900.0
    warmup_s: float = 180.0
    overload: float = 1.5
    cancel_share: float = 0.2
    capacity: float | None = None  # requests per second; None: measured first
    capacity_concurrency: int = 32
    capacity_requests: int = 64
    drain_limit_s: float | None = None  # None: from the backlog and the capacity
    sample_every_s: float = 2.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.warmup_s < self.duration_s:
            raise ValueError("the warm-up must be shorter than the duration")
        if self.overload <= 0 or (self.capacity is not None and self.capacity <= 0):
            raise ValueError("the overload and the capacity must be positive")
        if not 0 <= self.cancel_share <= 1:
            raise ValueError("the cancel share must be within [0, 1]")
        if not 1 <= self.capacity_concurrency < self.capacity_requests:
            raise ValueError("the capacity run needs more requests than its concurrency")
        if self.sample_every_s <= 0:
            raise ValueError("the sampling interval must be positive")


async def settle(probe: ServerProbe) -> dict[str, float]:
    """After the last response: wait for the queue to drain, then for the KV cache to empty."""
    gauges, waited = await probe.wait_for(nothing_queued, IDLE_WAIT_S)
    drained = nothing_queued(gauges)
    if drained:
        gauges, _ = await probe.wait_for(lambda g: not g["kv_cache_usage"] > 0, KV_SETTLE_S)
    return {**gauges, "idle_wait_s": waited, "drained": float(drained)}


def run(
    url: str,
    model: str,
    make_jobs: JobMaker,
    workload: str,
    settings: SoakSettings,
    out_dir: Path,
    name: str,
) -> tuple[dict, list[Path]]:
    """The soak, reported with its metadata and written as JSON, Markdown and a plot."""
    report = asyncio.run(soak(url, make_jobs, settings))
    meta = run_metadata(title="Soak", url=url, model=model, workload=workload, seed=settings.seed)
    report = {"meta": meta, **report}
    return report, write(report, out_dir, name)


async def soak(url: str, make_jobs: JobMaker, settings: SoakSettings) -> dict:
    """Capacity (unless given), the soak, and its checks: the report without its metadata."""
    runs = []
    async with load_client(url) as client:
        if settings.capacity is None:
            jobs = make_jobs(settings.seed, settings.capacity_requests)
            closed_loop = LoadSettings(
                math.inf,
                max_concurrency=settings.capacity_concurrency,
                seed=settings.seed,
                sample_every_s=settings.sample_every_s,
            )
            record, results = await measured_run(client, jobs, closed_loop, Slo())
            runs.append(record)
            capacity = sustained_rate(results, statistics.fmean(n for _, n in jobs))
        else:
            capacity = {"measured": False, "requests_per_s": settings.capacity}
        rate = settings.overload * capacity["requests_per_s"]
        # Other prompts than the capacity run's, which the prefix cache would serve faster.
        load = LoadSettings(
            rate,
            cancel_share=settings.cancel_share,
            seed=settings.seed + 1,
            duration_s=settings.duration_s,
            sample_every_s=settings.sample_every_s,
        )
        jobs = make_jobs(load.seed, math.ceil(rate * settings.duration_s * JOB_MARGIN) + 20)
        record, results = await measured_run(client, jobs, load, Slo(), settle)
        runs.append(record)
    refusals = refusal_figures(results)
    memory = memory_figures(record["timeline"], settings.warmup_s, settings.duration_s)
    settled = record["server"]["after_idle"]
    drain = drain_figures(results, settled, capacity["requests_per_s"], settings.drain_limit_s)
    checks = [error_check(results), *refusal_checks(refusals), memory_check(memory)]
    checks += drain_checks(drain)
    return {
        "settings": asdict(settings),
        "capacity": capacity,
        "rate": rate,
        "runs": runs,
        "refusals": refusals,
        "memory": memory,
        "drain": drain,
        "checks": [asdict(c) for c in checks],
        "passed": all(c.passed for c in checks),
    }


def to_markdown(report: dict) -> str:
    settings, capacity = report["settings"], report["capacity"]
    rows = [
        [c["name"], "pass" if c["passed"] else "FAIL", c["measured"], c["limit"]]
        for c in report["checks"]
    ]
    if capacity["measured"]:
        measured = (
            f"measured: {capacity['output_tokens_per_s']:.1f} output tok/s with "
            f"{settings['capacity_concurrency']} requests in flight for "
            f"{capacity['window_s']:.0f} s, {capacity['mean_output_tokens']:.0f} tokens a request"
        )
    else:
        measured = "given"
    lines = [
        f"# {report['meta']['title']}: {'pass' if report['passed'] else 'FAIL'}",
        "",
        markdown_table(["check", "result", "measured", "limit"], rows),
        "",
        f"Capacity {capacity['requests_per_s']:.3f} req/s ({measured}); offered "
        f"{report['rate']:.3f} req/s ({settings['overload']}×) for {settings['duration_s']:.0f} s "
        f"with {settings['cancel_share']:.0%} of the clients cancelling mid-stream; warm-up "
        f"{settings['warmup_s']:.0f} s. The last run below is the soak.",
        "",
        runs_markdown(report),
        run_section(report["meta"]),
    ]
    return "\n".join(lines)


def write(report: dict, out_dir: Path, name: str) -> list[Path]:
    settings = report["settings"]
    points = report["runs"][-1]["timeline"]

    def timeline(figure) -> None:
        memory, usage, queue = figure.subplots(3, 1, sharex=True)
        times = [p["t"] for p in points]
        memory.plot(times, [p["rss_bytes"] / MIB for p in points])
        memory.set_ylabel("resident MiB")
        usage.plot(times, [p["kv_cache_usage"] for p in points])
        usage.set_ylabel("KV usage")
        queue.plot(times, [p["running"] for p in points], label="running")
        queue.plot(times, [p["waiting"] for p in points], label="waiting")
        queue.set_ylabel("requests")
        queue.set_xlabel("seconds into the soak")
        queue.legend(fontsize="x-small")
        for axes in (memory, usage, queue):
            axes.axvline(settings["warmup_s"], color="grey", linestyle=":")
            axes.axvline(settings["duration_s"], color="grey", linestyle="--")

    return write_report(out_dir, name, report, to_markdown(report), {"timeline": timeline})
