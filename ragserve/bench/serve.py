"""`ragserve bench serve|rag`: load against a running server, one run or a sweep of request
rates up to overload, reported as JSON, Markdown and PNG plots."""

import asyncio
import math
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from ragserve.bench.client import RequestResult
from ragserve.bench.jobs import JobMaker
from ragserve.bench.load import Job, LoadSettings, ServerProbe, counter_deltas, run_load
from ragserve.bench.measures import Slo, request_latencies, server_time_split, summarize
from ragserve.reports import markdown_table, run_metadata, run_section, summary, write_report

TIMEOUT = httpx.Timeout(600.0, connect=10.0)


@dataclass(frozen=True)
class LoadPlan:
    """A load's settings, the latency objectives its runs are judged by, and the request rates
    it runs at, one run each."""

    settings: LoadSettings
    objectives: Slo
    rates: tuple[float, ...]


# After a run: wait for the server to settle and return what it then reports.
Settle = Callable[[ServerProbe], Awaitable[dict[str, float]]]


async def measure(
    client: httpx.AsyncClient, jobs: list[tuple[Job, int]], settings: LoadSettings, slo: Slo
) -> dict:
    """One run: the client-side summary, and what the server's metrics say happened."""
    run, _ = await measured_run(client, jobs, settings, slo)
    return run


async def measured_run(
    client: httpx.AsyncClient,
    jobs: list[tuple[Job, int]],
    settings: LoadSettings,
    slo: Slo,
    settle: Settle = ServerProbe.wait_idle,
) -> tuple[dict, list[RequestResult]]:
    """measure(), with the per-request results kept and the wait after the run chosen."""
    probe = ServerProbe(client)
    before = await probe.read()
    results, duration, timeline = await run_load(client, jobs, settings, probe)
    idle = await settle(probe)
    after = await probe.read()
    run = {
        "rate": settings.rate if math.isfinite(settings.rate) else "inf",
        "max_concurrency": settings.max_concurrency,
        "cancel_share": settings.cancel_share,
        "summary": summarize(results, duration, slo),
        "per_user": per_user(results),
        "server": {"counters": counter_deltas(before, after), "after_idle": idle},
        "timeline": timeline,
    }
    if any(r.server_timings for r in results):
        run["rag_split_ms"] = server_time_split(results)
        answered = [r for r in results if r.ok and r.refused is not None]
        run["refused_share"] = sum(bool(r.refused) for r in answered) / max(1, len(answered))
    return run, results


def per_user(results: list[RequestResult]) -> dict[str, dict]:
    by_user: dict[str, list[RequestResult]] = defaultdict(list)
    for result in results:
        by_user[result.user].append(result)
    return {
        user: {
            "requests": len(mine),
            "completed": sum(r.ok for r in mine),
            "ttft_ms_p50": summary([request_latencies(r)["ttft_ms"] for r in mine if r.ok])["p50"],
        }
        for user, mine in by_user.items()
    }


def run(
    title: str, url: str, make_jobs: JobMaker, requests: int, plan: LoadPlan, meta: dict
) -> dict:
    """The plan's runs of `requests` requests each, reported with the metadata under the
    title."""
    runs = asyncio.run(sweep(url, make_jobs, requests, plan))
    return {"meta": run_metadata(title=title, **meta), "runs": runs}


async def sweep(url: str, make_jobs: JobMaker, requests: int, plan: LoadPlan) -> list[dict]:
    """One run per rate, the server idle between. Each run draws its own prompts (seed + run
    number): a repeated prompt would be served from the prefix cache and flatter later runs."""
    runs = []
    async with load_client(url) as client:
        for n, rate in enumerate(plan.rates):
            settings = replace(plan.settings, rate=rate, seed=plan.settings.seed + n)
            jobs = make_jobs(settings.seed, requests)
            runs.append(await measure(client, jobs, settings, plan.objectives))
    return runs


def load_client(url: str) -> httpx.AsyncClient:
    """A client for a load run: no cap on connections (the workload sets the concurrency), and
    a connection of its own for every request. llama.cpp's server closes kept-alive connections
    as the client reuses them: 1 and 3 of 8 one-at-a-time requests then failed with "Server
    disconnected without sending a response", none with a connection each."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    return httpx.AsyncClient(base_url=url, timeout=TIMEOUT, limits=limits)


def to_markdown(report: dict) -> str:
    lines = [f"# {report['meta']['title']}", "", runs_markdown(report), run_section(report["meta"])]
    return "\n".join(lines)


def runs_markdown(report: dict) -> str:
    """The workload, a table of the runs, and what the server's counters say of each."""
    rows = []
    for run in report["runs"]:
        s = run["summary"]
        rows.append(
            [
                run["rate"],
                s["requests"],
                s["completed"],
                s["cancelled"],
                sum(s["rejected"].values()),
                s["request_throughput"],
                s["output_token_throughput"],
                s["goodput"],
                s["ttft_ms"]["p50"],
                s["ttft_ms"]["p99"],
                s["tpot_ms"]["p50"],
                s["itl_ms"]["p99"],
                s["e2e_ms"]["p99"],
            ]
        )
    headers = [
        "rate (req/s)",
        "requests",
        "done",
        "cancelled",
        "rejected",
        "req/s",
        "out tok/s",
        "goodput (req/s)",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "ITL p99 ms",
        "E2E p99 ms",
    ]
    lines = [
        f"Workload: {report['meta']['workload']}. SLOs: {report['runs'][0]['summary']['slo']}.",
        "",
        markdown_table(headers, rows),
        "",
    ]
    for run in report["runs"]:
        server = run["server"]
        interesting = {k: v for k, v in server["counters"].items() if v}
        if interesting or run.get("rag_split_ms"):
            lines.append(f"## Rate {run['rate']}")
            lines.append("")
        if interesting:
            lines.append(markdown_table(["server counter", "change"], sorted(interesting.items())))
            lines.append("")
            lines.append(f"After the run, once idle: {server['after_idle']}.")
            lines.append("")
        if run.get("rag_split_ms"):
            split = run["rag_split_ms"]
            lines.append(
                markdown_table(
                    ["server time (ms)", "mean", "p50", "p90", "p99"],
                    [[k, *v.values()] for k, v in split.items()],
                )
            )
            lines.append(f"\nRefused: {run['refused_share']:.3f} of answers.\n")
        rejected = run["summary"]["rejected"]
        if rejected:
            lines.append(f"Rejections by status: {rejected}.\n")
        failed = run["summary"]["failed"]
        if failed or rejected:
            lines.append(f"Failed: {failed}. Most frequent errors: {run['summary']['errors']}.\n")
    return "\n".join(lines)


def write(report: dict, out_dir: Path, name: str) -> list[Path]:
    runs = report["runs"]
    plots = {}
    if len(runs) > 1:
        rates = [float(r["rate"]) for r in runs]

        def load_curve(figure) -> None:
            throughput, latency = figure.subplots(1, 2)
            throughput.plot(
                rates,
                [r["summary"]["request_throughput"] for r in runs],
                "o-",
                label="completed req/s",
            )
            throughput.plot(
                rates, [r["summary"]["goodput"] for r in runs], "s--", label="goodput req/s"
            )
            throughput.plot(rates, rates, ":", color="grey", label="offered")
            throughput.set_xlabel("offered request rate (req/s)")
            throughput.legend(fontsize="small")
            latency.plot(rates, [r["summary"]["ttft_ms"]["p99"] / 1000 for r in runs], "o-")
            latency.set_xlabel("offered request rate (req/s)")
            latency.set_ylabel("p99 TTFT (s)")
            latency.set_ylim(bottom=0)

        plots["sweep"] = load_curve
    if any(r["timeline"] for r in runs):

        def timeline(figure) -> None:
            usage, queue = figure.subplots(2, 1, sharex=True)
            for run in runs:
                points = run["timeline"]
                label = f"rate {run['rate']}"
                usage.plot(
                    [p["t"] for p in points], [p["kv_cache_usage"] for p in points], label=label
                )
                queue.plot([p["t"] for p in points], [p["running"] for p in points], label=label)
            usage.set_ylabel("KV cache usage")
            queue.set_ylabel("running requests")
            queue.set_xlabel("seconds into the run")
            usage.legend(fontsize="x-small")

        plots["server"] = timeline
    return write_report(out_dir, name, report, to_markdown(report), plots)
