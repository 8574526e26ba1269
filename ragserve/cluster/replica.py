"""An engine replica: the configured model in its own engine, in one Ray Serve replica."""

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ray import serve

from ragserve.cluster.shared_state import REPORT_EVERY_S, shared_state
from ragserve.engine.async_engine import AsyncEngine
from ragserve.engine.cache_salt import CacheSalt
from ragserve.engine.engine import LLMEngine
from ragserve.engine.errors import EngineError
from ragserve.engine.outputs import RequestOutput
from ragserve.engine.sampling_params import SamplingParams
from ragserve.settings import Settings


@dataclass(frozen=True)
class ModelFacts:
    """What an API replica needs to know of the model without loading it."""

    max_model_len: int
    vocab_size: int
    block_size: int


class EngineReplica:
    """Deployed as Ray Serve's "engine" deployment (see deploy.py)."""

    async def __init__(self, fields: dict[str, object]) -> None:
        config = Settings(**fields).engine_config()
        self.engine = AsyncEngine(LLMEngine(config))
        self.engine.start()
        self.name = serve.get_replica_context().replica_tag
        self.shared = shared_state()
        self.reporter = asyncio.get_running_loop().create_task(self.report())

    def describe(self) -> ModelFacts:
        engine = self.engine.engine
        return ModelFacts(
            engine.max_model_len, engine.model.spec.vocab_size, engine.config.block_size
        )

    async def report(self) -> None:
        while True:
            self.shared.report.remote(self.name, self.engine.engine.stats())
            await asyncio.sleep(REPORT_EVERY_S)

    async def generate(
        self,
        prompt: list[int],
        params: SamplingParams,
        request_id: str,
        user: str,
        cache_salt: CacheSalt,
        priority: int,
        prefix_hashes: list[bytes],
    ) -> AsyncIterator[RequestOutput | EngineError | str]:
        """First this replica's name once the engine took the request, or the EngineError that
        refused it; then the request's outputs. Cancelling the call aborts the request.
        prefix_hashes is the router's (router.py) and not used here."""
        try:
            stream = await self.engine.add_request(
                prompt, params, request_id, user, cache_salt, priority
            )
        except EngineError as refusal:
            yield refusal
            return
        try:
            yield self.name
            async for output in stream:
                yield output
        finally:
            stream.close()

    def __del__(self) -> None:
        self.reporter.cancel()
        self.engine.shutdown()
