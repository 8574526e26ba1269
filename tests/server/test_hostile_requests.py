"""Hostile requests against a live server: prompts with unpaired surrogates and NULs, JSON nested
10,000 deep, bodies that are not JSON, a wrong type for every parameter, random request shapes
(hypothesis), and the hostile-file corpus as uploads. Every reply is a 2xx, or a 4xx in the
API's error shape, never a 5xx; and after each test the server still serves a normal request.
"""

import http.client
import io
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragserve.access import Role
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.server.answers import AnswerRequest
from ragserve.server.documents import DocumentText, SearchRequest
from ragserve.server.gate import KEYED_PREFIXES, UPLOAD_OVERHEAD
from ragserve.server.protocol import ChatCompletionRequest, CompletionRequest, SamplingFields
from ragserve.settings import Settings
from tests.hostile_corpus import GOOD_FILES, GOOD_WORDS, HostileFile, hostile_files
from tests.server.conftest import LiveServer, start_server

MODEL = "smollm2-135m-instruct"
DEEP = 10_000
# Each endpoint: a valid body, and the fields its model knows.
ENDPOINTS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "/v1/completions": (
        {"model": MODEL, "prompt": "Say hi", "max_tokens": 1},
        list(CompletionRequest.model_fields),
    ),
    "/v1/chat/completions": (
        {"model": MODEL, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 1},
        list(ChatCompletionRequest.model_fields),
    ),
    "/v1/search": ({"query": "lighthouse beams"}, list(SearchRequest.model_fields)),
    "/v1/answers": ({"question": "What do lighthouses do?"}, list(AnswerRequest.model_fields)),
    "/v1/documents": ({"text": "Hostile tests were here."}, list(DocumentText.model_fields)),
}
SURROGATES = ["\ud800", "\udfff", "text \udc80 inside", "cut pair \ud83d"]
# An object, a list, a string, and an integer beyond 64 bits: every field is a wrong type for
# most of them.
WRONG_VALUES: list[Any] = [{"x": 1}, ["x"], "x", 2**70]
# Randomly damaged copies of each format uploaded (the library and CLI tests take every one).
FLIPS_OVER_HTTP = 3
# No deadline: a request's time depends on the machine. No example database: nothing is written
# into the working tree, and every run draws afresh.
PROPERTY = settings(max_examples=30, deadline=None, database=None)
# Bodies far past every cap, generated as they are sent: a server that read one whole would be
# seen to (the client gets to send it all), and none is ever held by the test.
HUGE = 256 << 20
# What the client may hand its socket beyond what the server read: the two sockets' buffers
# (Linux grows a loopback receive buffer to tcp_rmem's 32 MiB at most).
SOCKET_SLACK = 40 << 20
UPLOAD_HEAD = b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n\r\n'
MULTIPART = "multipart/form-data; boundary=xyz"


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedder) -> Iterator[LiveServer]:
    """A live server whose valid completions are short: whatever shape hypothesis finds, a
    request generates at most 4 tokens, so hundreds of them stay fast."""
    config = EngineConfig(
        dtype="float32", kv_cache_memory_bytes=4096 * 46080, max_num_batched_tokens=64
    )
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        dtype="float32",
        max_num_batched_tokens=64,
        max_tokens_cap=4,
        default_max_tokens=4,
        answer_max_tokens=4,
    )
    yield from start_server(settings, LLMEngine(config), embedder)


@dataclass
class Api:
    """One client for the module's requests: every reply is checked and counted by status."""

    client: httpx.Client
    key: str
    tally: Counter

    def request(self, method: str, path: str, key: str | None = None, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key or self.key}", **kwargs.pop("headers", {})}
        response = self.client.request(method, path, headers=headers, **kwargs)
        self.tally[f"{response.status_code // 100}xx"] += 1
        check_reply(response)
        return response

    def post(
        self, path: str, content: bytes, content_type: str = "application/json"
    ) -> httpx.Response:
        return self.request("POST", path, content=content, headers={"Content-Type": content_type})


@pytest.fixture(scope="module")
def api(server) -> Iterator[Api]:
    writer = server.key("hana", ("qa",), tenant="hostile", role=Role.WRITER)
    started = time.perf_counter()
    with httpx.Client(base_url=server.url, timeout=60) as client:
        api = Api(client, writer, Counter())
        yield api
    # The figures of the docs.
    print(
        f"\nhostile requests: {api.tally.total()} sent in {time.perf_counter() - started:.1f} s; "
        + ", ".join(f"{status}: {n}" for status, n in sorted(api.tally.items()))
    )


@pytest.fixture(autouse=True)
def still_serving(server, api) -> Iterator[None]:
    """After each test, the server answers a normal request and its engine goes idle."""
    yield
    assert api.client.get("/health").status_code == 200
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 2}
    reply = api.request("POST", "/v1/chat/completions", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["finish_reason"] in ("stop", "length")
    assert reply.json()["usage"]["completion_tokens"] >= 1
    server.wait_idle()


def check_reply(response: httpx.Response) -> None:
    """A 2xx, or a 4xx whose body is the API's error shape; never a 5xx."""
    assert response.status_code < 500, response.text[:500]
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        assert isinstance(error["message"], str) and error["message"]
        assert isinstance(error["type"], str) and error["type"]
        assert error["param"] is None or isinstance(error["param"], str)
        assert error["code"] is None or isinstance(error["code"], str)
    elif response.headers.get("content-type", "").startswith("text/event-stream"):
        assert "engine_dead" not in response.text


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert 400 <= response.status_code < 500, response.text[:300]
    return response.json()["error"]


def with_value(base: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    return {**base, field: value}


def test_unpaired_surrogates_are_refused_by_name_wherever_they_are(api):
    for path in ENDPOINTS:
        refuse_surrogates(api, path)


def refuse_surrogates(api: Api, path: str) -> None:
    base, _ = ENDPOINTS[path]
    text_fields = [f for f in base if isinstance(base[f], str)]
    if path == "/v1/chat/completions":
        text_fields = ["messages.0.content"]
    for field in text_fields:
        for bad in SURROGATES:
            if field == "messages.0.content":
                body = with_value(base, "messages", [{"role": "user", "content": bad}])
            else:
                body = with_value(base, field, bad)
            # As JSON escapes ("\ud800"), and as the raw UTF-8 bytes of a surrogate.
            escaped = api.post(path, json.dumps(body).encode())
            assert error_of(escaped)["code"] == "invalid_unicode"
            assert error_of(escaped)["param"] == field
            raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
            assert error_of(api.post(path, raw))["code"] == "invalid_unicode"
    # In a key, and in a field the endpoint does not know.
    keyed = api.post(path, json.dumps({**base, "\ud800": 1}).encode())
    assert error_of(keyed)["code"] == "invalid_unicode"
    unknown = api.post(path, json.dumps({**base, "x": ["\udfff"]}).encode())
    assert error_of(unknown)["param"] == "x.0"


def test_nul_characters_are_served_or_refused_cleanly(api):
    for path, (base, _) in ENDPOINTS.items():
        for field in [f for f in base if isinstance(base[f], str) and f != "model"]:
            for value in ("\x00", "before\x00after", "\x00\x00\x00"):
                body = json.dumps(with_value(base, field, value)).encode()
                api.post(path, body)


def deep_bodies(base: dict[str, Any]) -> list[bytes]:
    """JSON nested 10,000 deep: bare, inside a field, unclosed, and in objects."""
    arrays = "[" * DEEP + "]" * DEEP
    objects = '{"a":' * DEEP + "1" + "}" * DEEP
    in_field = json.dumps(base)[:-1] + f', "extra": {arrays}}}'
    return [arrays.encode(), objects.encode(), in_field.encode(), ("[" * DEEP).encode()]


def test_json_nested_10000_deep_is_refused(api):
    for path, (base, _) in ENDPOINTS.items():
        for body in deep_bodies(base):
            # Refused by its depth, before any parser recursed into it.
            error = error_of(api.post(path, body))
            assert error["code"] == "invalid_json" and "nests deeper than" in error["message"]


NOT_JSON = [
    b"not json",
    b"{",
    b'{"model": }',
    b"\x00\x01\x02",
    b"\xff\xfe{\x00}\x00",
    b'{"max_tokens": NaN}',
    b'{"top_k": Infinity}',
    b'{"n": ' + b"9" * 5000 + b"}",
    b"null",
    b"[]",
    b'"a string"',
    b"",
]


def test_bodies_that_are_not_json_objects_are_400(api):
    # A multipart body, cut off before its closing boundary.
    cut = b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nhal'
    for path in ENDPOINTS:
        for body in NOT_JSON:
            response = api.post(path, body)
            assert response.status_code == 400, (body[:20], response.text)
        for kind in ("text/plain", "application/x-www-form-urlencoded", "application/xml"):
            response = api.post(path, b"a=1&b=2", kind)
            assert response.status_code == 400, response.text
        api.post(path, cut, "multipart/form-data; boundary=xyz")


def test_a_wrong_type_for_every_parameter(api):
    for path, (base, fields) in ENDPOINTS.items():
        if path == "/v1/chat/completions":  # the fields it shares are swept on /v1/completions
            fields = [f for f in fields if f not in SamplingFields.model_fields]
        refused = 0
        for field in fields:
            for value in WRONG_VALUES:
                body = json.dumps(with_value(base, field, value)).encode()
                refused += api.post(path, body).status_code == 400
        # A field takes one or two of these types at most (a string, an object of options).
        assert refused >= len(fields) * (len(WRONG_VALUES) - 2), path


# Strings as a hostile client sends them: any code point, unpaired surrogates and NULs included.
TEXT = st.text(
    st.characters(exclude_categories=()) | st.characters(categories=["Cs"]) | st.just("\x00"),
    max_size=12,
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def request_bodies(draw: st.DrawFn, path: str) -> bytes:
    """A valid body with some fields replaced by any JSON, some dropped, some unknown ones
    added; or any JSON at all; as ASCII JSON (surrogates escaped) or as raw UTF-8."""
    base, fields = ENDPOINTS[path]
    body: Any
    if draw(st.integers(0, 9)) == 0:
        body = draw(JSON)
    else:
        body = {k: v for k, v in base.items() if k not in draw(st.sets(st.sampled_from(fields)))}
        body.update(draw(st.dictionaries(st.sampled_from(fields), JSON, max_size=3)))
        body.update(draw(st.dictionaries(TEXT, JSON, max_size=2)))
    if draw(st.booleans()):
        return json.dumps(body).encode()
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


def property_test(path: str):
    @PROPERTY
    @given(body=request_bodies(path))
    def run(api, body: bytes) -> None:
        api.post(path, body)

    return run


test_random_completion_requests = property_test("/v1/completions")
test_random_chat_requests = property_test("/v1/chat/completions")
test_random_search_requests = property_test("/v1/search")
test_random_answer_requests = property_test("/v1/answers")
test_random_document_requests = property_test("/v1/documents")


def over_http(hostile: HostileFile) -> bool:
    """The corpus, but only the first few randomly damaged copies of each format: the HTTP path
    adds the upload around the same ingestion, which the library and CLI tests drive with all."""
    copy = re.search(r"-flip(\d+)\.", hostile.name)
    return copy is None or int(copy.group(1)) < FLIPS_OVER_HTTP


def test_hostile_uploads_each_get_their_own_error_and_good_ones_are_stored(server, api):
    key = server.key("ulla", tenant="uploads", role=Role.WRITER)

    def upload(name: str, data: bytes) -> httpx.Response:
        files = {"file": (name, io.BytesIO(data))}
        return api.request("POST", "/v1/documents", key, files=files)

    stored = 0
    for hostile in filter(over_http, hostile_files()):
        response = upload(hostile.name, hostile.data)
        if response.status_code == 201:
            assert hostile.expect != "error", f"{hostile.name} was stored"
            stored += 1
        else:
            error = error_of(response)
            assert hostile.expect != "text", error
            assert error["code"] == "unparseable_document"
            assert hostile.name in error["message"] and hostile.words in error["message"]
    for name, data in GOOD_FILES.items():
        assert upload(name, data).status_code == 201
    for name, word in GOOD_WORDS.items():
        found = api.request("POST", "/v1/search", key, json={"query": word})
        assert found.json()["data"][0]["source"] == name
    listed = api.request("GET", "/v1/documents", key).json()["data"]
    assert len(listed) == stored + len(GOOD_FILES)


def test_unknown_routes_and_methods_get_the_error_shape(api):
    missing = api.post("/v1/nothing-here", b"{}")
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    wrong = api.request("GET", "/v1/completions")
    assert wrong.status_code == 405 and "allow" in wrong.headers


@pytest.mark.parametrize(
    "acl", ["[" * 10_000 + "]" * 10_000, '{"groups": ["\\ud800"]}', '{"groups": ["eng"]']
)
def test_a_hostile_acl_form_field_is_a_400(server, acl):
    key = server.key("hana", ("eng",), role=Role.WRITER)
    response = httpx.post(
        server.url + "/v1/documents",
        headers={"Authorization": f"Bearer {key}"},
        files={"file": ("note.txt", b"A note about owls.", "text/plain")},
        data={"acl": acl},
        timeout=60,
    )
    assert response.status_code == 400, response.text
    assert "acl" in response.json()["error"]["message"]


def test_every_path_that_needs_a_key_is_under_a_keyed_prefix(server):
    # The gate authenticates by path before reading a body: a route needing a key elsewhere
    # would read bodies of strangers, a keyless one under the prefix would be unreachable.
    for path, operations in server.app.openapi()["paths"].items():
        for method, operation in operations.items():
            keyed = "401" in operation["responses"]
            assert keyed == path.startswith(KEYED_PREFIXES), (method, path)


def declared_only(
    server, path: str, headers: dict[str, str], length: int
) -> tuple[http.client.HTTPResponse, bytes]:
    """A request that declares a body of `length` bytes and sends one of them: an answer can
    only come from a server that did not wait for the rest."""
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=20)
    connection.putrequest("POST", path)
    for name, value in {**headers, "Content-Length": str(length)}.items():
        connection.putheader(name, value)
    connection.endheaders(b"{")
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response, body


def test_a_body_without_a_valid_key_is_refused_before_it_is_read(server):
    for path, kind in [
        ("/v1/chat/completions", "application/json"),
        ("/v1/embeddings", "text/plain"),
        ("/v1/documents", MULTIPART),
        ("/v1/no-such-route", "application/json"),
    ]:
        for key in ({}, {"Authorization": "Bearer rsk-not-a-key"}):
            response, body = declared_only(server, path, {"Content-Type": kind, **key}, 1 << 30)
            assert response.status == 401, (path, body)
            assert response.getheader("connection") == "close"
            code = json.loads(body)["error"]["code"]
            assert code == ("invalid_api_key" if key else "missing_api_key")


def test_a_body_over_its_cap_is_413_before_it_is_read_and_one_at_the_cap_is_served(server, api):
    writer = {"Authorization": f"Bearer {api.key}"}
    api_cap = server.state.settings.max_request_bytes
    upload_cap = server.state.settings.max_upload_bytes + UPLOAD_OVERHEAD
    for path, kind, length, code in [
        ("/v1/chat/completions", "application/json", api_cap + 1, "request_too_large"),
        ("/v1/documents", "application/json", upload_cap + 1, "file_too_large"),
        ("/v1/documents", MULTIPART, upload_cap + 1, "file_too_large"),
    ]:
        response, body = declared_only(server, path, {"Content-Type": kind, **writer}, length)
        assert response.status == 413, (path, body)
        assert json.loads(body)["error"]["code"] == code
    # Exactly at the cap (JSON may pad with whitespace), a body is read and served.
    query = b'{"query": "lighthouse beams"}'
    padded = query[:-1] + b" " * (api_cap - len(query)) + b"}"
    assert api.post("/v1/search", padded).status_code == 200


@dataclass
class Streamed:
    response: httpx.Response
    sent: int  # bytes the client handed its socket before the answer came


def stream_body(
    server, path: str, headers: dict[str, str], head: bytes = b"", pace_s: float = 0.0
) -> Streamed:
    """POST HUGE bytes after head (chunked: no Content-Length), 1 MiB at a time, pace_s apart.
    The client reads the answer once its write fails (the server closed) or all is sent."""
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        yield head
        piece = b" " * (1 << 20)
        while sent < HUGE:
            sent += len(piece)
            yield piece
            time.sleep(pace_s)

    response = httpx.post(server.url + path, content=body(), headers=headers, timeout=120)
    return Streamed(response, sent)


@contextmanager
def health_timed(server) -> Iterator[list[float]]:
    """GET /health every 20 ms on another thread while the block runs: the latencies, in ms."""
    latencies: list[float] = []
    running = threading.Event()
    running.set()

    def poll() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            while running.is_set():
                started = time.perf_counter()
                assert client.get("/health").status_code == 200
                latencies.append((time.perf_counter() - started) * 1000)
                time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        yield latencies
    finally:
        running.clear()
        poller.join()


def test_huge_bodies_without_a_key_are_refused_at_once_and_health_stays_fast(server):
    with health_timed(server) as health_ms:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # strangers keep sending
            streamed = stream_body(server, "/v1/chat/completions", {})
            assert streamed.response.status_code == 401, streamed.response.text
            check_reply(streamed.response)
            # The server read none of it: what went out is what the sockets buffer.
            assert streamed.sent <= SOCKET_SLACK, streamed.sent
    # Wide margins: the point is no stall of seconds (1000 MiB used to stall /health 11 s).
    assert len(health_ms) >= 5 and max(health_ms) < 1000, health_ms


def test_a_chunked_json_body_over_the_cap_is_cut_off_there(server, api):
    writer = {"Authorization": f"Bearer {api.key}", "Content-Type": "application/json"}
    streamed = stream_body(server, "/v1/chat/completions", writer)
    assert streamed.response.status_code == 413, streamed.response.text
    assert error_of(streamed.response)["code"] == "request_too_large"
    assert streamed.sent <= server.state.settings.max_request_bytes + SOCKET_SLACK


def test_a_chunked_upload_over_the_limit_is_cut_off_at_the_cap(server, api):
    key = server.key("uma", tenant="chunked", role=Role.WRITER)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": MULTIPART}
    # Paced, so that the server reads for a while and /health is timed meanwhile.
    with health_timed(server) as health_ms:
        streamed = stream_body(server, "/v1/documents", headers, UPLOAD_HEAD, pace_s=0.01)
    assert streamed.response.status_code == 413, streamed.response.text
    assert error_of(streamed.response)["code"] == "file_too_large"
    cap = server.state.settings.max_upload_bytes + UPLOAD_OVERHEAD
    assert streamed.sent <= cap + SOCKET_SLACK, streamed.sent
    assert len(health_ms) >= 5 and max(health_ms) < 1000, health_ms
    assert api.request("GET", "/v1/documents", key).json()["data"] == []
