import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import uvicorn

from ragserve.access import Role
from ragserve.engine.async_engine import AsyncEngine
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.rag.embeddings import Embedder
from ragserve.server.app import build_app
from ragserve.settings import Settings


@dataclass
class LiveServer:
    url: str
    app: object

    @property
    def state(self):
        return self.app.state.ragserve

    @property
    def engine(self) -> LLMEngine:
        return self.state.engine.engine

    def key(
        self,
        user: str,
        groups: tuple[str, ...] = (),
        tenant: str = "default",
        role: Role = Role.READER,
    ) -> str:
        key, _ = self.state.keys.create(user, list(groups), tenant, role)
        return key

    def wait_idle(self, timeout: float = 20.0) -> None:
        """Wait until the engine holds no request and every KV block is free again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stats = self.engine.stats()
            if (
                stats.num_running == 0
                and stats.num_waiting == 0
                and stats.kv_blocks_free == stats.kv_blocks_total
            ):
                return
            time.sleep(0.05)
        raise AssertionError(f"engine not idle: {self.engine.stats()}")


def start_server(settings: Settings, engine: LLMEngine, embedder: Embedder) -> Iterator[LiveServer]:
    app = build_app(settings, AsyncEngine(engine), embedder)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield LiveServer(f"http://127.0.0.1:{port}", app)
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedder) -> Iterator[LiveServer]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        dtype="float32",
        max_concurrent_requests_per_user=2,
        tokens_per_minute_per_user=20_000,
        max_tokens_cap=512,
        max_num_batched_tokens=64,
        response_cache=True,
    )
    engine = LLMEngine(
        EngineConfig(dtype="float32", kv_cache_memory_bytes=4096 * 46080, max_num_batched_tokens=64)
    )
    yield from start_server(settings, engine, embedder)
