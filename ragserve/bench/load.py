"""Sends a workload at its arrival times, with optional concurrency cap, cancellations and a time
limit, while sampling the server's own gauges (KV usage, running and waiting requests, resident
memory) when it exposes Prometheus metrics (ragserve and vLLM do)."""

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ragserve.bench.client import RequestResult

# One request: given the client and after how many chunks to cancel (None: never).
Job = Callable[[httpx.AsyncClient, int | None], Awaitable[RequestResult]]

SAMPLE_EVERY_S = 0.25
# A gauge's series (one per engine replica, or per model in vLLM) add up, except usage shares,
# which are averaged (replicas have equal KV pools).
GAUGES = {
    "kv_cache_usage": ("ragserve:kv_cache_usage_perc", "vllm:kv_cache_usage_perc"),
    "running": ("ragserve:num_requests_running", "vllm:num_requests_running"),
    "waiting": ("ragserve:num_requests_waiting", "vllm:num_requests_waiting"),
    "rss_bytes": ("process_resident_memory_bytes",),
}
GAUGE_METRICS = {metric for metrics in GAUGES.values() for metric in metrics}
# A sample line of the Prometheus text format: name, optional {labels}, value.
SAMPLE_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{.*\})?\s+(\S+)")


@dataclass(frozen=True)
class LoadSettings:
    rate: float  # requests per second; inf sends everything at once
    burstiness: float = 1.0
    max_concurrency: int | None = None
    cancel_share: float = 0.0
    seed: int = 0
    # Seconds after which no more jobs are sent (those in flight finish); None: send them all.
    duration_s: float | None = None
    sample_every_s: float = SAMPLE_EVERY_S


class ServerProbe:
    """Reads GET /metrics; silent (empty readings) when the server has none."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def _text(self) -> str:
        try:
            response = await self.client.get("/metrics", timeout=5)
        except httpx.HTTPError:
            return ""
        return response.text if response.status_code == 200 else ""

    async def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(await self._text()):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                name = f"{sample.name}{{{labels}}}" if labels else sample.name
                values[name] = values.get(name, 0.0) + sample.value
        return values

    async def gauges(self) -> dict[str, float]:
        """The GAUGES now. Only their lines are parsed: a full parse of every histogram, four
        times a second, cost the client more CPU than its 32 streams did, on the cores the
        server under test was using."""
        series: dict[str, list[float]] = {}
        for line in (await self._text()).splitlines():
            sample = SAMPLE_LINE.match(line)
            if sample and sample[1] in GAUGE_METRICS:
                series.setdefault(sample[1], []).append(float(sample[2]))
        gauges = {}
        for name, metrics in GAUGES.items():
            found = next((series[m] for m in metrics if m in series), [])
            if not found:
                gauges[name] = float("nan")
            else:
                gauges[name] = sum(found) / (len(found) if name == "kv_cache_usage" else 1)
        return gauges

    async def wait_idle(self, timeout_s: float = 60.0) -> dict[str, float]:
        """Wait until nothing runs or waits; the gauges then (or at the timeout). A server
        without these gauges (NaN) counts as idle."""
        gauges, _ = await self.wait_for(nothing_queued, timeout_s)
        return gauges

    async def wait_for(
        self, condition: Callable[[dict[str, float]], bool], timeout_s: float
    ) -> tuple[dict[str, float], float]:
        """Poll the gauges until condition holds or timeout_s passes; the last gauges read and
        the seconds waited."""
        started = time.monotonic()
        gauges = await self.gauges()
        while time.monotonic() - started < timeout_s and not condition(gauges):
            await asyncio.sleep(SAMPLE_EVERY_S)
            gauges = await self.gauges()
        return gauges, time.monotonic() - started


def nothing_queued(gauges: dict[str, float]) -> bool:
    """No request runs or waits (NaN, a gauge the server lacks, compares as not above 0)."""
    return not (gauges["running"] > 0 or gauges["waiting"] > 0)


def counter_deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """How much each counter grew during a run."""
    return {
        name: after[name] - before.get(name, 0.0)
        for name in after
        if name.endswith("_total") or "_total{" in name
    }


async def run_load(
    client: httpx.AsyncClient,
    jobs: list[tuple[Job, int]],
    settings: LoadSettings,
    probe: ServerProbe | None = None,
) -> tuple[list[RequestResult], float, list[dict[str, float]]]:
    """Run jobs (each with its expected output chunks) at the arrival times, until they run out
    or settings.duration_s has passed; returns the results of the jobs sent, in submission
    order, the wall time until the last of them ended, and the gauge timeline."""
    from ragserve.bench.workload import arrival_gaps

    rng = random.Random(settings.seed)
    gaps = arrival_gaps(len(jobs), settings.rate, settings.burstiness, rng)
    limit = asyncio.Semaphore(settings.max_concurrency or len(jobs) or 1)
    timeline: list[dict[str, float]] = []
    started = time.perf_counter()
    sampling = True

    async def sample() -> None:
        while sampling and probe is not None:
            timeline.append({"t": time.perf_counter() - started, **await probe.gauges()})
            await asyncio.sleep(settings.sample_every_s)

    async def one(job: Job, cancel_after: int | None) -> RequestResult:
        async with limit:
            return await job(client, cancel_after)

    sampler = asyncio.create_task(sample())
    tasks = []
    for gap, (job, expected_chunks) in zip(gaps, jobs, strict=True):
        await asyncio.sleep(gap)
        if settings.duration_s is not None and time.perf_counter() - started > settings.duration_s:
            break
        cancel = rng.random() < settings.cancel_share
        cancel_after = rng.randint(1, max(1, expected_chunks - 1)) if cancel else None
        tasks.append(asyncio.create_task(one(job, cancel_after)))
    results = list(await asyncio.gather(*tasks))
    duration = time.perf_counter() - started
    sampling = False
    await sampler
    return results, duration, timeline
