"""Request bodies are checked once, before any route reads them: JSON text that Python's decoder
would choke on (nesting deep enough to exhaust its recursion) or that holds what is not Unicode
(JSON can escape an unpaired surrogate, "\\ud800", which no tokenizer, store or encoder accepts)
is a 400 in the API's error shape, never a 500 from deep inside a route.
"""

import json
import re
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragserve.server.errors import error_body

# Real request bodies nest a few levels (a tool's JSON schema perhaps a dozen). Deeper ones are
# refused before they are parsed: Python's JSON decoder and pydantic recurse once per level.
MAX_JSON_DEPTH = 64
# A JSON string (escapes included); once strings are gone, every byte but a bracket is dropped.
JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
WITH_BODY = {"POST", "PUT", "PATCH"}


class BodyProblem(ValueError):
    """Why a body is refused: code is the error code, param where in the body (if known)."""

    def __init__(self, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _lone_surrogate_at(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """Where the first string (or key) that holds an unpaired surrogate is, or None."""
    if isinstance(value, str):
        return path if LONE_SURROGATE.search(value) else None
    children: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        if any(LONE_SURROGATE.search(key) for key in value):
            return path  # the message cannot quote such a key: its object is named instead
        children = value.items()
    elif isinstance(value, list):
        children = enumerate(value)
    else:
        return None
    for key, item in children:
        # Numbers and the like hold no text: no call for each of a long list of token ids.
        if (
            isinstance(item, str | list | dict)
            and (found := _lone_surrogate_at(item, (*path, str(key)))) is not None
        ):
            return found
    return None


def check_json_body(body: bytes) -> None:
    """Raise BodyProblem unless body is UTF-8 JSON (RFC 8259: no NaN or Infinity either) that
    nests at most MAX_JSON_DEPTH levels and whose strings are all Unicode."""
    depth = deepest = 0
    for bracket in JSON_STRING.sub(b"", body).translate(None, NOT_BRACKETS):
        depth += 1 if bracket in b"[{" else -1
        deepest = max(deepest, depth)
    if deepest > MAX_JSON_DEPTH:
        raise BodyProblem(
            f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels", "invalid_json"
        )
    try:
        value = json.loads(body.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError as error:
        raise BodyProblem(
            f"the body is not UTF-8: byte 0x{body[error.start]:02x} at offset {error.start}",
            "invalid_unicode",
        ) from error
    except ValueError as error:  # json.JSONDecodeError, an integer too long, NaN
        raise BodyProblem(f"the body is not valid JSON: {error}", "invalid_json") from error
    if (found := _lone_surrogate_at(value)) is not None:
        where = ".".join(found) or "body"
        raise BodyProblem(
            f"{where}: an unpaired surrogate (\\ud800-\\udfff) is not Unicode text",
            "invalid_unicode",
            where,
        )


class JsonBodyGuard:
    """ASGI middleware: reads a request's body, refuses one that check_json_body rejects, and
    hands the body on to the route otherwise. Multipart uploads pass untouched: their route
    counts their bytes as they arrive (and refuses a declared size before reading any)."""

    def __init__(self, app: ASGIApp, on_refusal: Callable[[], None]) -> None:
        self.app = app
        self.on_refusal = on_refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Not the lifespan, nor a request without a body, nor an upload.
        if (
            scope["type"] != "http"
            or scope["method"] not in WITH_BODY
            or Headers(scope=scope).get("content-type", "").startswith("multipart/form-data")
        ):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before its body was whole: nobody to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body:
            try:
                check_json_body(body)
            except BodyProblem as problem:
                self.on_refusal()
                refusal = error_body(
                    str(problem), "invalid_request_error", problem.code, problem.param
                )
                await JSONResponse(refusal, 400)(scope, receive, send)
                return
        replayed = False

        async def replay() -> Message:
            # The body once, as it came; then the client's own messages (a disconnect).
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
