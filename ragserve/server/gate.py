"""The gate every HTTP request passes before its route: the key first, then the body.

Every path under /v1/ needs a key, and a request for one is authenticated before a byte of its
body is read: a client without a valid key makes the server hold nothing of what it sends.
Every body is then counted against its path's cap (BodyCaps: max_request_bytes for the API,
max_upload_bytes plus room for the form for uploads) as it arrives: a declared Content-Length
over the cap is refused before reading, a body without one (chunked) as soon as it passes the
cap, so no more than the cap is ever held. A response that starts before the body ended (a
refusal, a route that needed none of it) closes the connection instead of reading the rest.
Refusals are 401s, 429s, 413s and (check_json_body) 400s, in the API's error shape.
"""

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragserve.server.bodies import BodyProblem, check_json_body
from ragserve.server.dependencies import PRINCIPAL_SCOPE_KEY, authenticate
from ragserve.server.errors import APIError, Rejection, invalid
from ragserve.server.state import ServerState
from ragserve.server.tracing import ARRIVED_SCOPE_KEY, AUTH_STEP_SCOPE_KEY

WITH_BODY = {"POST", "PUT", "PATCH"}
# vLLM and Cohere put some keyed routes outside /v1/: /tokenize, /detokenize, /v2/rerank.
KEYED_PREFIXES = ("/v1/", "/v2/", "/tokenize", "/detokenize")
# Room for a multipart body's boundaries, part headers and small fields (acl, doc_id), or for
# the JSON around an uploaded text (its other fields, quotes and escapes).
UPLOAD_OVERHEAD = 64 << 10
# A JSON body longer than this is checked on a worker thread. Its regular-expression and
# decoder passes hold the GIL throughout, so this bounds no stall; what it spares the event
# loop is the walk over the parsed value (a Python call per string, list and object).
OFF_LOOP_BYTES = 1 << 20


@dataclass(frozen=True)
class BodyCaps:
    """The most bytes a route takes as a body: JSON (anything not multipart) and multipart; a
    refusal names `limit` and carries `code`."""

    json: int
    multipart: int
    limit: str
    code: str

    @classmethod
    def api(cls, max_request_bytes: int) -> "BodyCaps":
        return cls(max_request_bytes, max_request_bytes, "max_request_bytes", "request_too_large")

    @classmethod
    def upload(cls, max_upload_bytes: int) -> "BodyCaps":
        """POST /v1/documents, a file or JSON text alike: an upload over the cap is refused
        before it is read, or parsed, whole; the route holds the file or text itself to
        max_upload_bytes. JSON that escapes each non-ASCII character (a six-byte \\u escape for
        2 or 3 bytes of UTF-8) spends the cap faster: large texts go as UTF-8 JSON or as a file."""
        cap = max_upload_bytes + UPLOAD_OVERHEAD
        return cls(cap, cap, "max_upload_bytes plus 64 KiB for the form", "file_too_large")

    def too_large(self, cap: int) -> APIError:
        return APIError(
            413,
            f"the request body is larger than {cap} bytes ({self.limit})",
            "invalid_request_error",
            self.code,
            rejection=Rejection.INVALID,
        )


class BodyTooLarge(Exception):
    """Raised by a route's receive once its body passes the cap: RequestGate answers 413."""


class ClientGone(Exception):
    """The client disconnected before its body was whole: nobody is left to answer."""


def is_multipart(headers: Headers) -> bool:
    return headers.get("content-type", "").startswith("multipart/form-data")


class CountedBody:
    """A request's receive channel, counted against a cap as each piece arrives."""

    def __init__(self, receive: Receive, headers: Headers, cap: int) -> None:
        self._receive = receive
        self.cap = cap
        declared = headers.get("content-length", "")
        self.declared = int(declared) if declared.isdigit() else None
        self.received = 0
        self.exceeded = False
        # HTTP/1.1: without a length or a transfer coding there is no body to wait for.
        self.whole = self.declared == 0 or (
            self.declared is None and "transfer-encoding" not in headers
        )

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.cap:
                self.exceeded = True
                raise BodyTooLarge
            if not message.get("more_body", False):
                self.whole = True
        return message

    async def read(self) -> bytes:
        """The whole body, held only up to the cap (BodyTooLarge past it)."""
        chunks = []
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(chunks)


class RequestGate:
    """ASGI middleware in front of every route: authenticates a request for a keyed path before
    its body, holds every body to its path's cap (caps by path, default otherwise), and checks
    a JSON body (check_json_body) once, handing it on to the route. Multipart bodies stream
    through to their route, still counted. `respond` renders a refusal (and counts it).

    Every path under KEYED_PREFIXES needs a key (tests/server/test_hostile_requests.py holds the
    routes to it), so one without is a 401 before its body, whether or not a route is there."""

    def __init__(
        self,
        app: ASGIApp,
        state: ServerState,
        respond: Callable[[APIError], Response],
        default: BodyCaps,
        caps: Mapping[str, BodyCaps],
    ) -> None:
        self.app = app
        self.state = state
        self.respond = respond
        self.default = default
        self.caps = caps

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[ARRIVED_SCOPE_KEY] = time.perf_counter()
        headers = Headers(scope=scope)
        caps = self.caps.get(scope["path"], self.default)
        multipart = is_multipart(headers)
        body = CountedBody(receive, headers, caps.multipart if multipart else caps.json)
        passage = Passage(self.app, self.respond, scope, send, body, caps)
        if scope["path"].startswith(KEYED_PREFIXES):
            client = scope["client"][0] if scope.get("client") else "unknown"
            try:
                checking = time.perf_counter()
                scope[PRINCIPAL_SCOPE_KEY] = authenticate(self.state, headers, client)
                scope[AUTH_STEP_SCOPE_KEY] = ("auth", checking, time.perf_counter())
            except APIError as error:
                await passage.refuse(error)
                return
        if body.declared is not None and body.declared > body.cap:
            await passage.refuse(caps.too_large(body.cap))
        elif scope["method"] in WITH_BODY and not multipart:
            await passage.checked_json()
        else:
            await passage.streamed()


@dataclass
class Passage:
    """One request on its way through RequestGate to the app."""

    app: ASGIApp
    respond: Callable[[APIError], Response]
    scope: Scope
    client_send: Send
    body: CountedBody
    caps: BodyCaps

    async def send(self, message: Message) -> None:
        # Answered before the body ended (a refusal, a route that needs none of it): the
        # connection closes rather than the server reading on to the end of the body.
        if message["type"] == "http.response.start" and not self.body.whole:
            MutableHeaders(scope=message)["connection"] = "close"
        await self.client_send(message)

    async def refuse(self, error: APIError) -> None:
        await self.respond(error)(self.scope, self.body.receive, self.send)

    async def checked_json(self) -> None:
        """Read the body whole (up to its cap), check it, and hand it on to the app."""
        try:
            data = await self.body.read()
        except BodyTooLarge:
            await self.refuse(self.caps.too_large(self.body.cap))
            return
        except ClientGone:
            return
        if data:
            try:
                if len(data) > OFF_LOOP_BYTES:
                    await run_in_threadpool(check_json_body, data)
                else:
                    check_json_body(data)
            except BodyProblem as problem:
                await self.refuse(invalid(str(problem), problem.code, problem.param))
                return
        replayed = False

        async def replay() -> Message:
            # The body once, as it came; then the client's own messages (a disconnect).
            nonlocal replayed
            if replayed:
                return await self.body.receive()
            replayed = True
            return {"type": "http.request", "body": data, "more_body": False}

        await self.app(self.scope, replay, self.send)

    async def streamed(self) -> None:
        """The route reads the body itself (an upload), counted; past the cap its read raises,
        and whatever the route makes of that, the client gets the 413."""
        started = False

        async def send_unless_exceeded(message: Message) -> None:
            nonlocal started
            if self.body.exceeded:
                return
            started = True
            await self.send(message)

        try:
            await self.app(self.scope, self.body.receive, send_unless_exceeded)
        except BodyTooLarge:
            if started:
                raise
        if self.body.exceeded and not started:
            await self.refuse(self.caps.too_large(self.body.cap))
