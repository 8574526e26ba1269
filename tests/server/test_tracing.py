"""Traces over OTLP/HTTP: a collector in the test (an HTTP endpoint decoding OTLP protobuf, as
a real collector does) receives one trace per request, its spans the steps of the answer path,
the engine's timeline as events, and no text or key in any attribute."""

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ragserve.access import Role
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.settings import Settings
from tests.server.conftest import start_server

MODEL = "smollm2-135m-instruct"
SECRET = "The Kestrel project budget is 7 million euros, approved in March."
QUESTION = "What is the Kestrel project budget?"


class Collector:
    def __init__(self) -> None:
        self.spans: list = []
        received = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        received.extend(scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1/traces"

    def traces(self) -> dict[bytes, list]:
        by_trace: dict[bytes, list] = {}
        for span in self.spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        return by_trace


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    found = Collector()
    yield found
    found.http.shutdown()


@pytest.fixture(scope="module")
def traced(tmp_path_factory, embedder, collector):
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("traced"),
        dtype="float32",
        otlp_traces_endpoint=collector.url,
        reranker="llm",
        answer_style="generate",
    )
    engine = LLMEngine(EngineConfig(dtype="float32", kv_cache_memory_bytes=4096 * 46080))
    yield from start_server(settings, engine, embedder)


def attribute_values(span) -> list[str]:
    values = [str(a.value.string_value or a.value.int_value) for a in span.attributes]
    for event in span.events:
        values += [str(a.value) for a in event.attributes]
    return values


def test_one_trace_per_request_with_the_answer_path_as_spans(traced, collector):
    writer = traced.key("wendy", ("eng",), role=Role.WRITER)
    reader = traced.key("erin", ("eng",))
    headers = {"Authorization": f"Bearer {writer}"}
    body = {"text": SECRET, "title": "Kestrel", "acl": {"groups": ["eng"]}}
    assert httpx.post(traced.url + "/v1/documents", json=body, headers=headers).status_code == 201
    headers = {"Authorization": f"Bearer {reader}"}
    answer = httpx.post(
        traced.url + "/v1/answers", json={"question": QUESTION}, headers=headers, timeout=120
    )
    assert answer.status_code == 200, answer.text
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    reply = httpx.post(traced.url + "/v1/chat/completions", json=chat, headers=headers)
    assert reply.status_code == 200
    traced.state.tracing.flush()

    roots = {s.name: s for s in collector.spans if not s.parent_span_id}
    assert {"POST /v1/answers", "POST /v1/chat/completions"} <= set(roots)
    traces = collector.traces()
    answer_spans = traces[roots["POST /v1/answers"].trace_id]
    root = roots["POST /v1/answers"]
    children = {s.name: s for s in answer_spans if s.parent_span_id == root.span_id}
    assert len(answer_spans) == len(children) + 1, "every step is a child of the request"
    steps = ["auth", "permission_filter", "retrieve", "rerank", "evidence", "generate", "check"]
    assert set(steps) <= set(children), sorted(children)
    ordered = sorted(children.values(), key=lambda s: s.start_time_unix_nano)
    assert [s.name for s in ordered if s.name in steps] == steps
    for span in children.values():
        assert root.start_time_unix_nano <= span.start_time_unix_nano
        assert span.start_time_unix_nano <= span.end_time_unix_nano <= root.end_time_unix_nano
    events = [e.name for e in children["generate"].events]
    assert events == ["queued", "prefill_started", "first_token", "finished"]
    # The reranker's prompts are the rerank step's: one engine request per passage.
    assert [e.name for e in children["rerank"].events].count("queued") >= 1
    chat_spans = traces[roots["POST /v1/chat/completions"].trace_id]
    assert {s.name for s in chat_spans} == {"POST /v1/chat/completions", "auth", "generate"}
    for span in collector.spans:
        for value in attribute_values(span):
            assert "Kestrel" not in value and "7 million" not in value
            assert reader not in value and writer not in value and "rsk-" not in value
