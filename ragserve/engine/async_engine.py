"""Runs the engine's step loop in a thread and streams each request's outputs to asyncio.

A request whose consumer goes away (client disconnect, cancelled task) is closed, which aborts
it; the engine frees its KV blocks at the next step boundary.
"""

import asyncio
import logging
import sys
import threading
import time
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from ragserve.engine.cache_salt import CacheSalt
from ragserve.engine.engine import LLMEngine
from ragserve.engine.errors import EngineDeadError
from ragserve.engine.outputs import RequestOutput
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.stats import EngineStats

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05
SWITCH_INTERVAL_S = 0.0005


class RequestStream:
    """The outputs of one request, as an async iterator; close() aborts it if unfinished."""

    def __init__(self, engine: "AsyncEngine", request_id: str) -> None:
        self.engine = engine
        self.request_id = request_id
        self.queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self.loop = asyncio.get_running_loop()
        self.token_times: list[float] = []
        self.finished = False
        self.closed = False

    def __aiter__(self) -> "RequestStream":
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        item = await self.queue.get()
        if isinstance(item, BaseException):
            raise EngineDeadError(f"the engine stopped: {item}") from item
        self.finished = item.finished
        return item

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.engine.release(self)


class AsyncEngine:
    """The engine in this process, as an EngineClient."""

    # The name its series carry in /metrics, beside Ray Serve replicas' names.
    REPLICA_NAME = "local"

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._streams: dict[str, RequestStream] = {}
        self._wakeup = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        # The engine loop owns the cores: the starting thread (a server's event loop, which
        # also embeds queries) computes on one. With a second multi-threaded OpenMP team in
        # the process, libgomp counts more threads than CPUs and cuts its spin-waits short,
        # and every parallel region of a decode step then waits on a futex wake-up (measured
        # on 2 cores: 44 ms per token instead of 26).
        torch.set_num_threads(1)
        # The engine's C++ kernels keep the GIL while they run (csrc/bindings.cpp says why), so
        # the event loop gets it only between two kernels, and a thread that wants the GIL waits
        # a whole switch interval before its holder is asked to drop it. At the default 5 ms a
        # refusal, which needs the GIL a few times, took 114-139 ms at p99 with six streams
        # decoding (2 busy cores); at 0.5 ms, 38-41 ms (ragserve bench soak wants < 50 ms).
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._thread.start()

    def shutdown(self) -> None:
        self._stopping = True
        self._wakeup.set()
        self._thread.join(timeout=10)

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self.engine.tokenizer

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    @property
    def model_path(self) -> Path:
        return self.engine.model_path

    def check_token_ids(self, token_ids: list[int]) -> None:
        self.engine.check_token_ids(token_ids)

    def replica_stats(self) -> dict[str, EngineStats]:
        return {self.REPLICA_NAME: self.engine.stats()}

    def route_decisions(self) -> dict[tuple[str, str], int]:
        return {}

    async def add_request(
        self,
        prompt: list[int],
        params: SamplingParams,
        request_id: str,
        user: str,
        cache_salt: str | CacheSalt,
        priority: int = 0,
    ) -> RequestStream:
        """Queue a request; raises the engine's validation and overload errors at once."""
        if self.error is not None:
            raise EngineDeadError(f"the engine stopped: {self.error}")
        stream = RequestStream(self, request_id)
        self._streams[request_id] = stream
        try:
            self.engine.add_request(prompt, params, request_id, user, cache_salt, priority)
        except BaseException:
            del self._streams[request_id]
            raise
        self._wakeup.set()
        return stream

    def release(self, stream: RequestStream) -> None:
        self._streams.pop(stream.request_id, None)
        if not stream.finished:
            self.engine.abort_request(stream.request_id)
            self._wakeup.set()

    def _run(self) -> None:
        while not self._stopping:
            if not self.engine.has_unfinished_requests():
                self._wakeup.wait(IDLE_WAIT_S)
                self._wakeup.clear()
                continue
            try:
                outputs = self.engine.step()
            except BaseException as error:  # every waiter must hear of it, not hang
                logger.exception("engine step failed")
                self.error = error
                for stream in list(self._streams.values()):
                    stream.loop.call_soon_threadsafe(stream.queue.put_nowait, error)
                return
            now = time.monotonic()
            for output in outputs:
                stream = self._streams.get(output.request_id)
                if stream is not None:
                    stream.token_times.append(now)
                    stream.loop.call_soon_threadsafe(stream.queue.put_nowait, output)
