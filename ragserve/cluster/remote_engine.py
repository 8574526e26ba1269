"""The engine replicas as one EngineClient, for an API replica: tokenizer and limits here, the
engine calls through Ray Serve's handle (and so through the router)."""

import asyncio
import contextlib
import time
from pathlib import Path

from ray.actor import ActorHandle
from ray.exceptions import RayError
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ragserve.cluster.replica import ModelFacts
from ragserve.cluster.shared_state import REPORT_EVERY_S
from ragserve.engine.block_manager import extend_block_hashes
from ragserve.engine.cache_salt import CacheSalt
from ragserve.engine.errors import EngineDeadError, check_token_ids
from ragserve.engine.loader import resolve_model
from ragserve.engine.outputs import RequestOutput
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.stats import EngineStats

# The router looks at most this many leading blocks of a prompt (1,024 tokens at 16 a block):
# enough to tell a tenant's system prompts and documents apart, cheap to hash per request.
ROUTE_BLOCKS = 64


class RemoteStream:
    """A request's outputs from the engine replica that took it; close() cancels the call,
    which aborts the request there."""

    def __init__(self, responses: DeploymentResponseGenerator, replica: str) -> None:
        self.responses = responses
        self.replica = replica
        self.token_times: list[float] = []
        self.finished = False

    def __aiter__(self) -> "RemoteStream":
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        try:
            output: RequestOutput = await self.responses.__anext__()
        except RayError as error:
            raise EngineDeadError(f"engine replica {self.replica} failed: {error}") from error
        self.token_times.append(time.monotonic())
        self.finished = output.finished
        return output

    def close(self) -> None:
        if not self.finished:
            self.responses.cancel()


class RemoteEngine:
    def __init__(
        self,
        model: str,
        facts: ModelFacts,
        handle: DeploymentHandle,
        shared: ActorHandle,
    ) -> None:
        self._model_path = resolve_model(model)
        self._tokenizer = AutoTokenizer.from_pretrained(self._model_path)
        self.facts = facts
        self.handle = handle.options(stream=True)
        self.shared = shared
        self._stats: dict[str, EngineStats] = {}
        self._routes: dict[tuple[str, str], int] = {}
        self._poller: asyncio.Task[None] | None = None

    @classmethod
    async def connect(
        cls, model: str, handle: DeploymentHandle, shared: ActorHandle
    ) -> "RemoteEngine":
        facts: ModelFacts = await handle.describe.remote()
        return cls(model, facts, handle, shared)

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    @property
    def max_model_len(self) -> int:
        return self.facts.max_model_len

    @property
    def model_path(self) -> Path:
        return self._model_path

    @property
    def error(self) -> BaseException | None:
        # A failed replica fails its own requests (EngineDeadError); Ray Serve replaces it.
        return None

    def check_token_ids(self, token_ids: list[int]) -> None:
        check_token_ids(token_ids, self.facts.vocab_size)

    def replica_stats(self) -> dict[str, EngineStats]:
        return self._stats

    def route_decisions(self) -> dict[tuple[str, str], int]:
        return self._routes

    async def add_request(
        self,
        prompt: list[int],
        params: SamplingParams,
        request_id: str,
        user: str,
        cache_salt: str | CacheSalt,
        priority: int = 0,
    ) -> RemoteStream:
        salt = cache_salt if isinstance(cache_salt, CacheSalt) else CacheSalt(cache_salt)
        size = self.facts.block_size
        # The blocks the engine's prefix cache would publish: all full ones but the last token's.
        blocks = min(ROUTE_BLOCKS, (len(prompt) - 1) // size)
        hashes = extend_block_hashes([], prompt, salt, size, params.batch_invariant, blocks)
        responses = self.handle.generate.remote(
            prompt, params, request_id, user, salt, priority, prefix_hashes=hashes
        )
        try:
            first = await responses.__anext__()
        except RayError as error:
            raise EngineDeadError(f"no engine replica took the request: {error}") from error
        if isinstance(first, BaseException):
            raise first
        return RemoteStream(responses, first)

    def start(self) -> None:
        self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            with contextlib.suppress(RayError):
                self._stats, self._routes = await self.shared.snapshot.remote()
            await asyncio.sleep(REPORT_EVERY_S)

    def shutdown(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
