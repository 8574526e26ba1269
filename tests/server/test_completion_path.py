"""The completion path without HTTP and without a model: complete() over a scripted engine.
It shows how choices are assembled, what the response cache stores and replays, and that the
per-user limiter is released on every way out."""

import asyncio
import json
from types import SimpleNamespace

import pytest

from ragserve.access import Principal, Role
from ragserve.engine.errors import EngineOverloadedError
from ragserve.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from ragserve.engine.stats import EngineStats
from ragserve.server.completions import complete
from ragserve.server.errors import APIError, Rejection
from ragserve.server.limits import AuthThrottle, UserLimiter
from ragserve.server.metrics import ServerMetrics
from ragserve.server.protocol import ChatCompletionRequest, CompletionRequest
from ragserve.server.response_cache import ResponseCache
from ragserve.server.state import ServerState
from ragserve.settings import Settings

WHO = Principal("u", frozenset(), "t", Role.READER, 1)
PROMPT = [1, 2, 3]


def output(texts: list[str], reasons: list[str | None]) -> RequestOutput:
    choices = [
        CompletionOutput(i, text, list(range(len(text))), reason)
        for i, (text, reason) in enumerate(zip(texts, reasons, strict=True))
    ]
    finished = all(r is not None for r in reasons)
    return RequestOutput("r", None, PROMPT, choices, finished, 0, RequestMetrics(0, 0, 0, 1))


class ScriptedStream:
    def __init__(self, outputs: list[RequestOutput]) -> None:
        self.outputs = outputs
        self.token_times: list[float] = []
        self.closed = False

    async def __aiter__(self):
        for item in self.outputs:
            yield item

    def close(self) -> None:
        self.closed = True


class ScriptedEngine:
    def __init__(self, outputs: list[RequestOutput] | Exception) -> None:
        self.outputs = outputs
        self.calls = 0

    max_model_len = 64

    def replica_stats(self) -> dict[str, EngineStats]:
        return {"local": EngineStats(0, 0, 0, 8, 8, 0, 0, 0)}

    async def add_request(self, *args: object) -> ScriptedStream:
        self.calls += 1
        if isinstance(self.outputs, Exception):
            raise self.outputs
        return ScriptedStream(self.outputs)


def state_with(engine: ScriptedEngine, tmp_path) -> ServerState:
    return ServerState(
        settings=Settings(data_dir=tmp_path),
        engine=engine,  # type: ignore[arg-type]
        keys=None,  # type: ignore[arg-type]
        limiter=UserLimiter(1, 10_000),
        auth_throttle=AuthThrottle(20),
        metrics=ServerMetrics(engine),  # type: ignore[arg-type]
        cache=ResponseCache(60, 10),
        model_id="m",
        weights_version="w",
        template_version="t",
        rag=SimpleNamespace(),  # type: ignore[arg-type]
    )


async def connected() -> bool:
    return False


REQUEST = SimpleNamespace(is_disconnected=connected, scope={})


async def body_of(response) -> str:
    if hasattr(response, "body_iterator"):
        return "".join([part async for part in response.body_iterator])
    return response.body.decode()


def test_streamed_choices_arrive_by_index_and_finish_once(tmp_path):
    engine = ScriptedEngine(
        [
            output(["Hel", "A"], [None, None]),
            output(["Hello", "A"], [None, "stop"]),
            output(["Hello!", "A"], ["length", "stop"]),
        ]
    )
    state = state_with(engine, tmp_path)
    body = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}], n=2)
    body.stream = True
    text = asyncio.run(body_of(asyncio.run(complete(state, body, PROMPT, REQUEST, WHO, None))))
    events = [json.loads(line[6:]) for line in text.splitlines() if line[6:7] == "{"]
    content = {0: "", 1: ""}
    finishes: dict[int, list[str]] = {0: [], 1: []}
    for event in events:
        for choice in event["choices"]:
            content[choice["index"]] += choice["delta"].get("content") or ""
            if choice["finish_reason"]:
                finishes[choice["index"]].append(choice["finish_reason"])
    assert content == {0: "Hello!", 1: "A"}
    assert finishes == {0: ["length"], 1: ["stop"]}
    assert text.endswith("data: [DONE]\n\n")
    assert state.limiter._active[WHO.account] == 0


def test_a_deterministic_completion_is_cached_and_replayed(tmp_path):
    engine = ScriptedEngine([output([" Paris"], ["stop"])])
    state = state_with(engine, tmp_path)
    body = CompletionRequest(model="m", prompt="The capital", temperature=0, echo=True)
    first = json.loads(
        asyncio.run(
            body_of(asyncio.run(complete(state, body, PROMPT, REQUEST, WHO, "The capital")))
        )
    )
    again = json.loads(
        asyncio.run(
            body_of(asyncio.run(complete(state, body, PROMPT, REQUEST, WHO, "The capital")))
        )
    )
    assert engine.calls == 1
    assert first["choices"][0]["text"] == again["choices"][0]["text"] == "The capital Paris"
    assert again["usage"] == first["usage"]


@pytest.mark.parametrize(
    ("failure", "status", "rejection"),
    [
        (EngineOverloadedError("queue full"), 503, Rejection.QUEUE_FULL),
        (None, 429, Rejection.PER_USER_CONCURRENCY),
    ],
)
def test_refusals_release_the_limiter(tmp_path, failure, status, rejection):
    engine = ScriptedEngine(failure or [output(["x"], ["stop"])])
    state = state_with(engine, tmp_path)
    if failure is None:
        asyncio.run(state.limiter.acquire(WHO.account, 1))  # the user's one slot is taken
    body = CompletionRequest(model="m", prompt="x", temperature=1.0)
    with pytest.raises(APIError) as refused:
        asyncio.run(complete(state, body, PROMPT, REQUEST, WHO, None))
    assert (refused.value.status, refused.value.rejection) == (status, rejection)
    assert state.limiter._active[WHO.account] == (1 if failure is None else 0)
