"""Prometheus metrics, named after vLLM's (prefix ragserve: instead of vllm:) where one exists.

Engine state (running, waiting, KV usage, prefix cache counters) is read at scrape time; request
latencies and outcomes are recorded as requests finish. The process's own figures (resident
memory, CPU seconds, open files) come under prometheus_client's usual process_* names, as in
vLLM, so that a soak can watch the server's memory from outside.
"""

import itertools
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ragserve.engine.engine import LLMEngine
from ragserve.engine.outputs import RequestOutput

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
ITL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


class EngineCollector(Collector):
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        stats = self.engine.stats()
        yield GaugeMetricFamily(
            "ragserve:num_requests_running", "Requests in the running batch.", stats.num_running
        )
        yield GaugeMetricFamily(
            "ragserve:num_requests_waiting", "Requests waiting to be admitted.", stats.num_waiting
        )
        yield GaugeMetricFamily(
            "ragserve:kv_cache_usage_perc",
            "Fraction of KV blocks in use (0-1).",
            stats.kv_cache_usage,
        )
        yield GaugeMetricFamily(
            "ragserve:kv_cache_free_blocks",
            "KV blocks not held by any request.",
            stats.kv_blocks_free,
        )
        yield CounterMetricFamily(
            "ragserve:prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache.",
            stats.prefix_cache_queries,
        )
        yield CounterMetricFamily(
            "ragserve:prefix_cache_hits",
            "Prompt tokens served from the prefix cache.",
            stats.prefix_cache_hits,
        )
        yield CounterMetricFamily(
            "ragserve:num_preemptions",
            "Sequences preempted for lack of KV blocks.",
            stats.num_preemptions,
        )
        yield CounterMetricFamily(
            "ragserve:spec_decode_num_draft_tokens",
            "Draft tokens verified by speculative decoding (prompt lookup).",
            stats.spec_decode_draft_tokens,
        )
        yield CounterMetricFamily(
            "ragserve:spec_decode_num_accepted_tokens",
            "Draft tokens accepted: each is a decode step saved.",
            stats.spec_decode_accepted_tokens,
        )


class ServerMetrics:
    def __init__(self, engine: LLMEngine) -> None:
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

    def observe_finished(self, output: RequestOutput, token_times: list[float]) -> None:
        metrics = output.metrics
        completion = output.outputs[0]
        reason = completion.finish_reason or "abort"
        self.request_success.labels(finished_reason=reason).inc()
        self.prompt_tokens.inc(len(output.prompt_token_ids))
        self.generation_tokens.inc(sum(len(choice.token_ids) for choice in output.outputs))
        if metrics.queue_time is not None:
            self.queue_time.observe(metrics.queue_time)
        if metrics.time_to_first_token is not None:
            self.time_to_first_token.observe(metrics.time_to_first_token)
        if metrics.finished_time is not None:
            self.e2e_latency.observe(metrics.finished_time - metrics.arrival_time)
        for earlier, later in itertools.pairwise(token_times):
            self.inter_token_latency.observe(later - earlier)
