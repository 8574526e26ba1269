"""One streamed request against an OpenAI-compatible server, timed on the client side.

Token times are the arrival times of the streamed chunks that carry text. A request chosen to
cancel closes its connection after a number of such chunks, as a client that goes away does.
"""

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class RequestResult:
    user: str
    start: float
    end: float = 0.0
    status: int = 0  # HTTP status; 0 when no response came
    token_times: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    cancelled: bool = False
    error: str | None = None
    # What the server reports of its own work (RAG: retrieval, rerank, check, total in ms).
    server_timings: dict[str, float] = field(default_factory=dict)
    refused: bool | None = None
    # The Retry-After header of a refusal (None when absent): when a client may try again.
    retry_after: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None and not self.cancelled


async def _events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


async def _send(
    client: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    key: str,
    result: RequestResult,
    cancel_after: int | None,
) -> RequestResult:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with client.stream("POST", path, json=body, headers=headers) as response:
            result.status = response.status_code
            if response.status_code != 200:
                await response.aread()
                result.error = response.text[:200]
                result.retry_after = response.headers.get("retry-after")
                return result
            async for event in _events(response):
                carried_text = _record(event, result)
                if (
                    carried_text
                    and cancel_after is not None
                    and (len(result.token_times) >= cancel_after)
                ):
                    result.cancelled = True
                    break  # leaving the block closes the connection
    except httpx.HTTPError as error:
        result.error = f"{type(error).__name__}: {error}"
    finally:
        result.end = time.perf_counter()
    return result


def _record(event: dict[str, Any], result: RequestResult) -> bool:
    """Fold one streamed event into the result; True when it carried generated text."""
    now = time.perf_counter()
    if event.get("type") == "error" or ("error" in event and "choices" not in event):
        result.error = str(event.get("message") or event.get("error"))[:200]
        return False
    if event.get("type") == "answer":  # /v1/answers: the checked answer and its timings
        usage = event.get("usage") or {}
        result.prompt_tokens = usage.get("prompt_tokens", 0)
        result.output_tokens = usage.get("completion_tokens", 0)
        result.server_timings = event.get("timings") or {}
        result.refused = event.get("refused")
        return False
    if event.get("usage"):
        result.prompt_tokens = event["usage"].get("prompt_tokens", 0)
        result.output_tokens = event["usage"].get("completion_tokens", 0)
    choices = event.get("choices") or []
    text = event.get("text") if event.get("type") == "token" else None
    if text is None and choices:
        text = choices[0].get("text") or (choices[0].get("delta") or {}).get("content")
    if text:
        result.token_times.append(now)
        return True
    return False


async def completion(
    client: httpx.AsyncClient,
    model: str,
    prompt: str,
    max_tokens: int,
    key: str,
    user: str,
    cancel_after: int | None = None,
    extra: dict[str, object] | None = None,
    temperature: float = 0.0,
) -> RequestResult:
    """A streamed completion of max_tokens tokens; extra: more body fields."""
    body = (extra or {}) | {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        # Honoured by vLLM and ragserve; the requested output length is then what is generated.
        "ignore_eos": True,
    }
    result = RequestResult(user, time.perf_counter())
    return await _send(client, "/v1/completions", body, key, result, cancel_after)


async def answer(
    client: httpx.AsyncClient,
    question: str,
    key: str,
    user: str,
    cancel_after: int | None = None,
) -> RequestResult:
    result = RequestResult(user, time.perf_counter())
    body = {"question": question, "stream": True}
    return await _send(client, "/v1/answers", body, key, result, cancel_after)
