"""What the server and the RAG path use of an engine, wherever it runs: in this process
(AsyncEngine) or as replicas behind Ray Serve (ragserve.cluster.remote_engine.RemoteEngine).

Both speak in token ids: the caller tokenizes, so a request that reaches an engine is already
within its limits, and a router in front of replicas can see the prompt's prefix.
"""

import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ragserve.engine.cache_salt import CacheSalt, Narrowing
from ragserve.engine.outputs import RequestOutput
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.stats import EngineStats

if TYPE_CHECKING:  # importing transformers takes a second; the RAG path may need no model
    from transformers import PreTrainedTokenizerBase


class TokenizedModel(Protocol):
    """The model as prompt building sees it: its tokenizer and context length."""

    @property
    def tokenizer(self) -> "PreTrainedTokenizerBase": ...

    @property
    def max_model_len(self) -> int: ...


@dataclass(frozen=True)
class FixedModel:
    """A tokenizer and context length known up front, as a TokenizedModel."""

    tokenizer: "PreTrainedTokenizerBase"
    max_model_len: int


class OutputStream(Protocol):
    """One request's outputs as they come; close() aborts it if unfinished."""

    # When each output arrived (time.monotonic()), for inter-token latency.
    token_times: list[float]

    def __aiter__(self) -> AsyncIterator[RequestOutput]: ...

    def close(self) -> None: ...


async def final_output(stream: OutputStream) -> RequestOutput:
    """The last output: the whole result of a request that is not streamed."""
    last = None
    async for output in stream:
        last = output
    assert last is not None
    return last


class EngineClient(TokenizedModel, Protocol):
    @property
    def model_path(self) -> Path: ...

    @property
    def error(self) -> BaseException | None:
        """Why the engine stopped, or None while it serves."""

    def check_token_ids(self, token_ids: list[int]) -> None:
        """Raise InvalidRequestError for ids outside the vocabulary."""

    def replica_stats(self) -> dict[str, EngineStats]:
        """Each replica's occupancy and counters, by replica name."""

    def route_decisions(self) -> dict[tuple[str, str], int]:
        """Requests routed so far by (decision, replica); empty where nothing routes."""

    async def add_request(
        self,
        prompt: list[int],
        params: SamplingParams,
        request_id: str,
        user: str,
        cache_salt: str | CacheSalt,
        priority: int = 0,
    ) -> OutputStream:
        """Queue a request; raises the engine's validation and overload errors (EngineError)
        or EngineDeadError at once."""

    def start(self) -> None: ...

    def shutdown(self) -> None: ...


class Generate(Protocol):
    def __call__(
        self, token_ids: list[int], params: SamplingParams, narrowing: Narrowing = ()
    ) -> AsyncIterator[RequestOutput]:
        """Run a prompt (token ids) on the served model, yielding the request's output so far.
        `narrowing` names where restricted text starts and who may read it (CacheSalt), so
        its KV blocks are shared only with callers that may read it too."""
        ...


def generator(
    engine: "EngineClient",
    user: str,
    tenant: str,
    prefix: str,
    finished: Callable[[RequestOutput, OutputStream], None] | None = None,
) -> Generate:
    """Generation as one principal: each call streams one prompt's completion (request ids
    prefix-0, prefix-1, ...). The tenant salts the prefix cache, and a prompt's narrowing (who
    may read each source) salts its blocks from the first source on; closing the stream aborts
    the request; finished sees each completed request with its stream (for metrics)."""
    counter = itertools.count()

    async def generate(
        token_ids: list[int], params: SamplingParams, narrowing: Narrowing = ()
    ) -> AsyncIterator[RequestOutput]:
        salt = CacheSalt(tenant, narrowing)
        stream = await engine.add_request(
            token_ids, params, f"{prefix}-{next(counter)}", user, salt
        )
        output = None
        try:
            async for output in stream:
                yield output
        finally:
            stream.close()
            if finished is not None and output is not None and output.finished:
                finished(output, stream)

    return generate
