"""Prometheus metrics, named after vLLM's (prefix ragserve: instead of vllm:) where one exists.

Engine state (running, waiting, KV usage, prefix cache counters) is read at scrape time; request
latencies and outcomes are recorded as requests finish, in histograms for Prometheus and in a
short window of recent requests for the status page's percentiles. The process's own figures
(resident memory, CPU seconds, open files) come under prometheus_client's usual process_* names,
as in vLLM, so that a soak can watch the server's memory from outside.
"""

import itertools
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ragserve.engine.client import EngineClient
from ragserve.engine.outputs import RequestOutput
from ragserve.rag.sources.registry import SourceRegistry

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
ITL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


# (name, help, the EngineStats field, gauge or counter): one series per replica.
ENGINE_SERIES = (
    ("num_requests_running", "Requests in the running batch.", "num_running", False),
    ("num_requests_waiting", "Requests waiting to be admitted.", "num_waiting", False),
    ("kv_cache_usage_perc", "Fraction of KV blocks in use (0-1).", "kv_cache_usage", False),
    ("kv_cache_free_blocks", "KV blocks not held by any request.", "kv_blocks_free", False),
    (
        "prefix_cache_queries",
        "Prompt tokens looked up in the prefix cache.",
        "prefix_cache_queries",
        True,
    ),
    ("prefix_cache_hits", "Prompt tokens served from the prefix cache.", "prefix_cache_hits", True),
    ("num_preemptions", "Sequences preempted for lack of KV blocks.", "num_preemptions", True),
    (
        "spec_decode_num_draft_tokens",
        "Draft tokens verified by speculative decoding (prompt lookup).",
        "spec_decode_draft_tokens",
        True,
    ),
    (
        "spec_decode_num_accepted_tokens",
        "Draft tokens accepted: each is a decode step saved.",
        "spec_decode_accepted_tokens",
        True,
    ),
    (
        "constrained_closed_early",
        "Constrained outputs closed with their grammar's shortest ending to fit max_tokens.",
        "constrained_closed_early",
        True,
    ),
)


class EngineCollector(Collector):
    """The engine replicas' state, read at scrape time, with a `replica` label; and, behind Ray
    Serve, the router's decisions by replica."""

    def __init__(self, engine: EngineClient) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        by_replica = self.engine.replica_stats()
        for name, documentation, field, is_counter in ENGINE_SERIES:
            family_type = CounterMetricFamily if is_counter else GaugeMetricFamily
            family = family_type(f"ragserve:{name}", documentation, labels=["replica"])
            for replica, stats in sorted(by_replica.items()):
                family.add_metric([replica], getattr(stats, field))
            yield family
        routes = self.engine.route_decisions()
        if routes:
            family = CounterMetricFamily(
                "ragserve:router_decisions",
                "Requests routed to each engine replica: prefix (the replica that last saw the "
                "prompt's longest known prefix), fallback (that replica was saturated) or new "
                "(no known prefix; the next replica in turn, or a less loaded one).",
                labels=["decision", "replica"],
            )
            for (decision, replica), count in sorted(routes.items()):
                family.add_metric([decision, replica], count)
            yield family


# The status page's percentiles cover this much of the recent past, and at most so many requests.
RECENT_WINDOW_S = 300.0
RECENT_MAX_REQUESTS = 2000


# What a source's last sync did, per file outcome, as gauges read from the registry at scrape.
SYNC_OUTCOMES = ("added", "changed", "deleted", "unchanged", "repermissioned")


class SourceCollector(Collector):
    """Each source's last sync: files by outcome, failures, seconds, when it finished."""

    def __init__(self, registry: SourceRegistry) -> None:
        self.sources = registry

    def collect(self) -> Iterator[Metric]:
        labels = ["tenant", "source"]
        files = GaugeMetricFamily(
            "ragserve:source_last_sync_files",
            "Files of the source's last sync, by outcome.",
            labels=[*labels, "outcome"],
        )
        seconds = GaugeMetricFamily(
            "ragserve:source_last_sync_seconds", "The last sync's duration.", labels=labels
        )
        finished = GaugeMetricFamily(
            "ragserve:source_last_sync_timestamp_seconds",
            "When the last sync finished (seconds since the epoch).",
            labels=labels,
        )
        for config, report in self.sources.all():
            if report is None:
                continue
            names = [config.tenant, config.name]
            for outcome in SYNC_OUTCOMES:
                files.add_metric([*names, outcome], report[outcome])
            files.add_metric([*names, "failed"], len(report["failed"]))
            seconds.add_metric(names, report["seconds"])
            finished.add_metric(names, report["finished_at"])
        yield from (files, seconds, finished)


@dataclass(frozen=True)
class FinishedRequest:
    at: float  # time.monotonic() when it finished
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    output_tokens: int


def percentiles(values: list[float], scale: float = 1000.0) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99]) * scale
    return {"p50": round(float(p50), 1), "p90": round(float(p90), 1), "p99": round(float(p99), 1)}


class RecentRequests:
    """The requests finished in the last RECENT_WINDOW_S seconds; exact percentiles, unlike
    the histograms' buckets."""

    def __init__(self) -> None:
        self._finished: deque[FinishedRequest] = deque(maxlen=RECENT_MAX_REQUESTS)

    def add(self, finished: FinishedRequest) -> None:
        self._finished.append(finished)

    def summary(self) -> dict[str, object]:
        now = time.monotonic()
        recent = [r for r in list(self._finished) if now - r.at <= RECENT_WINDOW_S]
        # Tokens per second over the span the window really covers, so a fresh server does
        # not report its first seconds' tokens spread over five minutes.
        span = min(RECENT_WINDOW_S, now - recent[0].at) if recent else 0.0
        tokens = sum(r.output_tokens for r in recent)
        return {
            "window_s": RECENT_WINDOW_S,
            "finished": len(recent),
            "output_tokens_per_s": round(tokens / span, 2) if span > 1.0 else 0.0,
            "ttft_ms": percentiles([r.ttft_s for r in recent if r.ttft_s is not None]),
            "tpot_ms": percentiles([r.tpot_s for r in recent if r.tpot_s is not None]),
            "e2e_ms": percentiles([r.e2e_s for r in recent if r.e2e_s is not None]),
        }


class ServerMetrics:
    def __init__(self, engine: EngineClient) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(engine))
        ProcessCollector(registry=self.registry)
        r = self.registry
        self.time_to_first_token = Histogram(
            "ragserve:time_to_first_token_seconds",
            "Time to first token.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inter_token_latency = Histogram(
            "ragserve:inter_token_latency_seconds",
            "Time between output tokens.",
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.e2e_latency = Histogram(
            "ragserve:e2e_request_latency_seconds",
            "Arrival to last token.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_time = Histogram(
            "ragserve:request_queue_time_seconds",
            "Arrival to first scheduling.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "ragserve:prompt_tokens", "Prompt tokens of finished requests.", registry=r
        )
        self.generation_tokens = Counter(
            "ragserve:generation_tokens", "Generated tokens.", registry=r
        )
        self.request_success = Counter(
            "ragserve:request_success",
            "Finished requests by finish reason.",
            ["finished_reason"],
            registry=r,
        )
        self.requests_rejected = Counter(
            "ragserve:requests_rejected",
            "Requests refused before running, by reason.",
            ["reason"],
            registry=r,
        )
        self.response_cache_queries = Counter(
            "ragserve:response_cache_queries", "Cacheable requests looked up.", registry=r
        )
        self.response_cache_hits = Counter(
            "ragserve:response_cache_hits",
            "Requests answered from the response cache.",
            registry=r,
        )
        self.recent = RecentRequests()

    def watch_sources(self, registry: SourceRegistry) -> None:
        self.registry.register(SourceCollector(registry))

    def observe_finished(self, output: RequestOutput, token_times: list[float]) -> None:
        metrics = output.metrics
        completion = output.outputs[0]
        reason = completion.finish_reason or "abort"
        self.request_success.labels(finished_reason=reason).inc()
        self.prompt_tokens.inc(len(output.prompt_token_ids))
        generated = sum(len(choice.token_ids) for choice in output.outputs)
        self.generation_tokens.inc(generated)
        if metrics.queue_time is not None:
            self.queue_time.observe(metrics.queue_time)
        if metrics.time_to_first_token is not None:
            self.time_to_first_token.observe(metrics.time_to_first_token)
        e2e = None
        if metrics.finished_time is not None:
            e2e = metrics.finished_time - metrics.arrival_time
            self.e2e_latency.observe(e2e)
        for earlier, later in itertools.pairwise(token_times):
            self.inter_token_latency.observe(later - earlier)
        tpot = None
        # Per token of the first choice, not per streamed chunk: a chunk carries every token a
        # step accepted.
        first_choice = len(completion.token_ids)
        finished, first = metrics.finished_time, metrics.first_token_time
        if first_choice > 1 and finished is not None and first is not None:
            tpot = (finished - first) / (first_choice - 1)
        self.recent.add(
            FinishedRequest(
                time.monotonic(),
                metrics.time_to_first_token,
                tpot,
                e2e,
                generated,
            )
        )
