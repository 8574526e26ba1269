"""`ragserve bench soak`: its checks on hand-made traces, and a 30 s form against a live server
with three tenants."""

import asyncio
import json
import math
import subprocess
import sys
import time

import httpx
import pytest

from ragserve.bench.client import RequestResult
from ragserve.bench.load import LoadSettings, run_load
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.reliability.soak import SoakSettings
from ragserve.reliability.soak_checks import (
    DRAIN_GRACE_S,
    MIB,
    REJECTION_P99_MS,
    drain_checks,
    drain_figures,
    error_check,
    memory_check,
    memory_figures,
    refusal_checks,
    refusal_figures,
    sustained_rate,
)
from ragserve.settings import Settings
from tests.server.conftest import start_server


def done(start: float, end: float, tokens: int = 2) -> RequestResult:
    times = [start + (end - start) * (i + 1) / tokens for i in range(tokens)]
    return RequestResult("u", start, end, 200, times, output_tokens=tokens)


def refused(start: float, ms: float, status: int = 429, retry_after: str | None = "1"):
    return RequestResult("u", start, start + ms / 1000, status, retry_after=retry_after)


def by_name(checks) -> dict:
    return {c.name: c for c in checks}


def test_errors_count_5xx_broken_and_unanswered_but_not_a_full_queue():
    fine = [done(0, 1), refused(0, 5, 503), RequestResult("u", 0, 1, 200, cancelled=True)]
    assert error_check(fine).passed
    for bad in (
        RequestResult("u", 0, 1, 500, error="Internal Server Error"),
        RequestResult("u", 0, 1, 200, [0.5], error="engine_dead"),  # an error event mid-stream
        RequestResult("u", 0, 1, 0, error="RemoteProtocolError: peer closed"),
    ):
        check = error_check([*fine, bad])
        assert not check.passed and "of 4 requests" in check.measured


def refusals_of(results: list[RequestResult]) -> dict:
    return by_name(refusal_checks(refusal_figures(results)))


def test_refusals_need_429_or_503_with_retry_after_and_a_fast_answer():
    fast = [refused(n, 10) for n in range(98)] + [refused(98, 20, 503), refused(99, 30)]
    good = refusals_of([done(0, 1), *fast])
    assert all(c.passed for c in good.values())
    assert good["every refusal a 429 or 503 with Retry-After"].measured == (
        "100 refusals (99 × 429, 1 × 503), 0 otherwise"
    )
    assert good["refusal latency p99"].measured.endswith("(p50 10.0, max 30.0)")
    without = refusals_of([*fast, refused(100, 5, 503, retry_after=None)])
    assert not without["every refusal a 429 or 503 with Retry-After"].passed
    wrong_status = refusals_of([*fast, refused(100, 5, 400)])
    assert not wrong_status["every refusal a 429 or 503 with Retry-After"].passed
    slow = refusals_of(fast[:90] + [refused(n, 80) for n in range(10)])
    assert not slow["refusal latency p99"].passed, "10% at 80 ms puts p99 over 50 ms"
    none = refusals_of([done(0, 1)])["refusal latency p99"]
    assert none.passed and none.measured == "no refusals"


def timeline(rss: list[float], every_s: float = 1.0) -> list[dict[str, float]]:
    return [{"t": n * every_s, "rss_bytes": v * MIB} for n, v in enumerate(rss)]


def test_memory_compares_the_first_and_last_quarters_after_warm_up():
    # 0-9 s warm-up (growing, not counted), then flat with one passing peak at 25 s.
    rss = [100 + 10 * n for n in range(10)] + [200.0] * 31
    rss[25] = 260
    figures = memory_figures(timeline(rss), warmup_s=10, load_s=40)
    assert figures["baseline_bytes"] == figures["final_bytes"] == 200 * MIB
    assert figures["peak_bytes"] == 260 * MIB and figures["growth"] == 0
    assert memory_check(figures).passed
    leaking = [100.0] * 10 + [200 + n for n in range(31)]  # +1 MiB/s after the warm-up
    figures = memory_figures(timeline(leaking), warmup_s=10, load_s=40)
    # First quarter 10-17.5 s: median of 200..207 = 203.5; last 32.5-40 s: median 226.5.
    assert figures["growth"] == pytest.approx(226.5 / 203.5 - 1)
    check = memory_check(figures)
    assert not check.passed and check.measured.startswith("+11.3% (204 → 226 MiB")


def test_memory_not_reported_fails():
    points = [{"t": float(n), "rss_bytes": math.nan} for n in range(40)]
    assert memory_figures(points, 10, 40) == {}
    check = memory_check({})
    assert not check.passed and "not reported" in check.measured


def settled(**gauges: float) -> dict[str, float]:
    base = {"running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0, "drained": 1.0}
    return {**base, "idle_wait_s": 0.5, **gauges}


def test_drain_is_bounded_by_the_backlog_at_half_the_capacity():
    # Sent at 0-10 s; at 10 s two requests are in flight (the last ends at 15 s).
    results = [done(0, 8), done(2, 4), done(9, 12), done(10, 15)]
    drain = drain_figures(results, settled(), capacity=0.5, drain_limit_s=None)
    assert drain["drain_s"] == pytest.approx(5.5) and drain["in_flight"] == 2
    # Two requests at half of 0.5 req/s take 8 s.
    assert drain["bound_s"] == 8 + DRAIN_GRACE_S
    assert all(c.passed for c in drain_checks(drain))
    limited = drain_figures(results, settled(), capacity=0.5, drain_limit_s=5)
    assert limited["bound_s"] == 5 and not drain_checks(limited)[0].passed


def test_a_queue_that_never_empties_or_kv_that_stays_held_fails():
    results = [done(0, 8), done(10, 15)]
    stuck = settled(running=2, drained=0, idle_wait_s=60)
    checks = drain_checks(drain_figures(results, stuck, 1.0, None))
    assert not checks[0].passed and checks[0].measured == "2 running, 0 waiting 60 s after"
    held = drain_checks(drain_figures(results, settled(kv_cache_usage=0.125), 1.0, None))
    assert held[0].passed and not held[1].passed and held[1].measured == "0.125"
    blind = settled(running=math.nan, waiting=math.nan)
    checks = drain_checks(drain_figures(results, blind, 1.0, None))
    assert not checks[0].passed and "not reported" in checks[0].measured


def test_capacity_counts_tokens_while_every_slot_is_busy():
    # Two slots; the third request starts at 4 s when the first ends: the window is 0-4 s.
    results = [done(0, 4, tokens=8), done(0, 6, tokens=6), done(4, 10, tokens=6)]
    rate = sustained_rate(results, mean_output_tokens=5)
    # Tokens by 4 s: 8 of the first, 4 of the second (every 1 s), none of the third yet.
    assert rate["output_tokens_per_s"] == pytest.approx(12 / 4)
    assert rate["requests_per_s"] == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match="capacity"):
        sustained_rate([done(0, 4), done(0, 5)], 5)
    with pytest.raises(ValueError, match="refused 2 of the capacity run's 5 requests"):
        sustained_rate([*results, refused(0.1, 5), refused(0.2, 5, 503)], 5)


def test_the_load_stops_sending_at_its_duration():
    async def instant(client, cancel_after) -> RequestResult:
        return done(time.perf_counter(), time.perf_counter())

    async def load() -> tuple[list[RequestResult], float, list]:
        async with httpx.AsyncClient() as client:
            return await run_load(client, [(instant, 1)] * 200, settings)

    settings = LoadSettings(rate=40.0, duration_s=0.5, seed=1)
    results, wall, _ = asyncio.run(load())
    assert 5 <= len(results) <= 40 and wall < 1.0, "about 20 of 200 jobs in half a second"


@pytest.mark.parametrize(
    "fields",
    [
        {"duration_s": 60, "warmup_s": 60},
        {"overload": 0},
        {"capacity": -1},
        {"cancel_share": 1.5},
        {"capacity_concurrency": 8, "capacity_requests": 8},
    ],
)
def test_settings_refuse_what_cannot_run(fields):
    with pytest.raises(ValueError):
        SoakSettings(**fields)


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedder):
    # 4 requests per user and 3 tenants: 12 in flight at most, a few more than the 8 the
    # capacity run keeps busy, so that 1.5x the capacity meets the per-user limit within the
    # minute while the capacity run's round-robin keys stay under it.
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        dtype="float32",
        max_concurrent_requests_per_user=4,
    )
    engine = LLMEngine(
        EngineConfig(dtype="float32", kv_cache_memory_bytes=4096 * 46080, max_num_seqs=8)
    )
    yield from start_server(settings, engine, embedder)


def test_a_20_second_soak_of_three_tenants_passes(server, tmp_path):
    keys = [server.key(f"user-{tenant}", tenant=tenant) for tenant in ("acme", "globex", "initech")]
    command = [sys.executable, "-m", "ragserve", "bench", "soak", "--url", server.url]
    for key in keys:
        command += ["--api-key", key]
    command += [
        *("--duration", "20", "--warmup", "8", "--sample-every", "1"),
        *("--capacity-concurrency", "8", "--capacity-requests", "16"),
        *("--max-prompt", "96", "--max-total", "128"),
        *("--out", str(tmp_path), "--json"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.stdout, result.stderr
    report = json.loads(result.stdout)
    # The 50 ms refusal goal is a speed figure (the benchmark exits 1 when it misses it, and
    # docs/reliability.md records it); a machine busy with other work can push it to 60-130 ms,
    # so here it only has to stay within ten times the goal.
    latency = next(c for c in report["checks"] if c["name"] == "refusal latency p99")
    failed = [c for c in report["checks"] if not c["passed"] and c is not latency]
    assert not failed, failed
    assert result.returncode == (0 if latency["passed"] else 1), result.stderr
    p99_ms = float(latency["measured"].split()[0])
    assert p99_ms < 10 * REJECTION_P99_MS, latency
    soak = report["runs"][-1]["summary"]
    assert soak["cancelled"] > 0 and soak["completed"] > 0
    assert sum(soak["rejected"].values()) > 0, "1.5x capacity meets the limits"
    assert set(report["runs"][-1]["per_user"]) == {"user-0", "user-1", "user-2"}
    assert {p.name for p in tmp_path.iterdir()} == {"soak.json", "soak.md", "soak-timeline.png"}
    server.wait_idle()
