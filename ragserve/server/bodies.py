"""Request bodies are checked once, before any route reads them (RequestGate, in gate.py, calls
check_json_body): JSON text that Python's decoder would choke on (nesting deep enough to exhaust
its recursion) or that holds what is not Unicode (JSON can escape an unpaired surrogate,
"\\ud800", which no tokenizer, store or encoder accepts) is a 400 in the API's error shape,
never a 500 from deep inside a route.
"""

import json
import re
from collections.abc import Iterable
from typing import Any, NoReturn

# Real request bodies nest a few levels (a tool's JSON schema perhaps a dozen). Deeper ones are
# refused before they are parsed: Python's JSON decoder and pydantic recurse once per level.
MAX_JSON_DEPTH = 64
# A JSON string (escapes included); once strings are gone, every byte but a bracket is dropped.
JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


class BodyProblem(ValueError):
    """Why a body is refused: code is the error code, param where in the body (if known)."""

    def __init__(self, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _has_surrogate(text: str) -> bool:
    # ASCII is told at once; otherwise strict UTF-8 encoding, which refuses surrogates, is
    # several times faster than searching for them (at the cost of a copy while it runs).
    if text.isascii():
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _lone_surrogate_at(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """Where the first string (or key) that holds an unpaired surrogate is, or None."""
    if isinstance(value, str):
        return path if _has_surrogate(value) else None
    children: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        if any(_has_surrogate(key) for key in value):
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
    nests at most MAX_JSON_DEPTH levels and whose strings are all Unicode.

    Each pass is one C call that holds the GIL (a worker thread running it still stops the event
    loop), so cheap ones decide first where they can: one 19 MiB string took 138 ms with every
    pass, about 45 ms with these, the longest call (the decoder's) under 20 ms."""
    depth = deepest = 0
    # No more opening brackets than the limit, anywhere: no deeper nesting either.
    if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH:
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
    # Strict UTF-8 decoding refuses encoded surrogates, so only a \u escape puts one in a
    # string: a body without one has none.
    if b"\\u" in body and (found := _lone_surrogate_at(value)) is not None:
        where = ".".join(found) or "body"
        raise BodyProblem(
            f"{where}: an unpaired surrogate (\\ud800-\\udfff) is not Unicode text",
            "invalid_unicode",
            where,
        )
