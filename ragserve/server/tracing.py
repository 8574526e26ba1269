"""OpenTelemetry traces, one per request, exported over OTLP/HTTP when the setting
otlp_traces_endpoint is set (as vLLM's --otlp-traces-endpoint); without it nothing is built or
recorded.

A request's root span covers it from arrival to its response; its children are the steps of the
answer path (auth, permission_filter, retrieve, rerank, evidence, generate, check), made from the
times each step recorded as it ran, so the lower layers need no tracing code. The engine's queue,
prefill and decode show as events on each generate span. Attributes name the tenant, the model,
token counts and timings: never a question, an answer, document text or a key.
"""

import time
from collections.abc import Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ragserve.access import Principal
from ragserve.engine.outputs import RequestOutput
from ragserve.rag.answer_result import AnswerResult

# Steps recorded with time.perf_counter(), as (name, start, end).
Step = tuple[str, float, float]
# What RequestGate records in the request's scope: when it arrived, and how long its key took.
ARRIVED_SCOPE_KEY = "ragserve.arrived"
AUTH_STEP_SCOPE_KEY = "ragserve.auth_step"


def to_epoch_ns(clock_s: float, clock: float, now_ns: int) -> int:
    """A reading of another clock (perf_counter or monotonic) as nanoseconds since the epoch,
    given that clock's reading `clock` at epoch time now_ns."""
    return now_ns - int((clock - clock_s) * 1e9)


@dataclass
class RequestTrace:
    """What one request's trace collects while it runs; turned into spans at its end."""

    steps: list[Step] = field(default_factory=list)
    engine_outputs: list[RequestOutput] = field(default_factory=list)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.steps.append((name, started, time.perf_counter()))

    def add_steps(self, steps: Sequence[Step]) -> None:
        self.steps.extend(steps)


class Tracing:
    """The server's tracer; disabled (every call a no-op) without an exporter."""

    def __init__(self, exporter: SpanExporter | None) -> None:
        self._provider: TracerProvider | None = None
        if exporter is not None:
            self._provider = TracerProvider(resource=Resource.create({"service.name": "ragserve"}))
            self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer("ragserve") if self._provider else None

    @classmethod
    def to(cls, endpoint: str | None) -> "Tracing":
        if not endpoint:
            return cls(None)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return cls(OTLPSpanExporter(endpoint=endpoint))

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def begin(self, scope: MutableMapping[str, Any]) -> tuple[float, RequestTrace | None]:
        """When the request arrived (a perf_counter reading), and its trace (None when
        tracing is off), holding the gate's auth step already."""
        arrived = scope.get(ARRIVED_SCOPE_KEY, time.perf_counter())
        if not self.enabled:
            return arrived, None
        request = RequestTrace()
        if AUTH_STEP_SCOPE_KEY in scope:
            request.steps.append(scope[AUTH_STEP_SCOPE_KEY])
        return arrived, request

    def record(
        self,
        name: str,
        started_s: float,
        request: RequestTrace,
        attributes: dict[str, str | int | float | bool],
        error: str | None = None,
    ) -> None:
        """The request's spans: the root (from started_s, a perf_counter reading, to now) and
        a child per recorded step, with the engine's timeline as events."""
        if self._tracer is None:
            return
        perf_now, mono_now, now_ns = time.perf_counter(), time.monotonic(), time.time_ns()
        root = self._tracer.start_span(
            name,
            kind=SpanKind.SERVER,
            start_time=to_epoch_ns(started_s, perf_now, now_ns),
            attributes=attributes,
        )
        if error is not None:
            root.set_status(Status(StatusCode.ERROR, error))
        parent = trace.set_span_in_context(root)
        spans = []
        for step, start, end in request.steps:
            span = self._tracer.start_span(
                step, context=parent, start_time=to_epoch_ns(start, perf_now, now_ns)
            )
            spans.append((span, to_epoch_ns(start, perf_now, now_ns), end))
        for output in request.engine_outputs:
            # On the step during which the engine took the request (a reranker's prompts
            # belong to rerank, the answer's to generate).
            arrived = to_epoch_ns(output.metrics.arrival_time, mono_now, now_ns)
            during = [span for span, start, _ in spans if start <= arrived]
            if during:
                engine_events(during[-1], output, mono_now, now_ns)
        for span, _, end in spans:
            span.end(end_time=to_epoch_ns(end, perf_now, now_ns))
        root.end(end_time=now_ns)

    def flush(self) -> None:
        if self._provider is not None:
            self._provider.force_flush()

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()


def engine_events(span: Span, output: RequestOutput, mono_now: float, now_ns: int) -> None:
    """One engine request's timeline on its step's span: queued, prefill started, first
    token, finished (engine times are time.monotonic readings), and its token counts."""
    metrics = output.metrics
    span.set_attribute("gen_ai.usage.input_tokens", len(output.prompt_token_ids))
    span.set_attribute("gen_ai.usage.output_tokens", sum(len(c.token_ids) for c in output.outputs))
    span.set_attribute("ragserve.cached_prompt_tokens", output.num_cached_tokens)
    span.set_attribute("ragserve.preemptions", metrics.num_preemptions)
    timeline = [
        ("queued", metrics.arrival_time),
        ("prefill_started", metrics.first_scheduled_time),
        ("first_token", metrics.first_token_time),
        ("finished", metrics.finished_time),
    ]
    for event, at in timeline:
        if at is not None:
            span.add_event(event, timestamp=to_epoch_ns(at, mono_now, now_ns))


def answer_attributes(
    who: Principal, model: str, result: AnswerResult | None
) -> dict[str, str | int | float | bool]:
    """What a trace may say about an answer: no question, answer or document text, no key."""
    attributes: dict[str, str | int | float | bool] = {
        "ragserve.tenant": who.tenant,
        "ragserve.role": who.role.value,
        "gen_ai.request.model": model,
    }
    if result is not None:
        attributes |= {
            "ragserve.answer.mode": result.mode,
            "ragserve.answer.citations": len(result.citations),
            "ragserve.answer.cached": not result.steps,
        }
    return attributes
