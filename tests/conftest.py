import inspect
import os
import tempfile
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def llm_fp32():
    """The default model in float32, with a small KV pool (4096 tokens) to keep tests light."""
    from ragserve import LLM

    return LLM(dtype="float32", kv_cache_memory_bytes=4096 * 46080)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A two-layer Llama with random weights and the default model's tokenizer (tiny_model.py)."""
    from ragserve.engine.config import DEFAULT_MODEL
    from ragserve.engine.loader import resolve_model
    from tests.tiny_model import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), resolve_model(DEFAULT_MODEL))


@pytest.fixture(scope="session")
def make_tiny_llm(tiny_model_dir):
    """The tiny model in float32, with the engine settings given."""
    from ragserve import LLM

    return lambda **engine_args: LLM(str(tiny_model_dir), "float32", **engine_args)


@pytest.fixture(scope="session")
def llm_tiny(make_tiny_llm):
    """The tiny model with a pool of 4096 tokens, for tests of the engine's mechanics: what it
    writes is meaningless."""
    from tests.tiny_model import KV_BYTES_PER_TOKEN

    return make_tiny_llm(kv_cache_memory_bytes=4096 * KV_BYTES_PER_TOKEN)


@pytest.fixture(scope="session")
def default_model_path(llm_fp32):
    return llm_fp32.engine.model_path


@pytest.fixture(scope="session")
def embedder():
    from ragserve.rag.embeddings import Embedder

    return Embedder()


@pytest.fixture(scope="session")
def reader():
    """The reader model's embedder, the one every service built in this process shares."""
    from ragserve.services import build_reader
    from ragserve.settings import Settings

    return build_reader(Settings())


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL with pgvector, from the pgserver package."""
    pgserver = pytest.importorskip("pgserver")
    # Outside pytest's temporary tree: run as root, pgserver opens the data folder's parents to
    # its own user, and each pytest-xdist worker closes pytest's tree to others again as it starts.
    with tempfile.TemporaryDirectory(prefix="ragserve-pg-") as folder:
        server = pgserver.get_server(Path(folder) / "pgdata", cleanup_mode="stop")
        yield server
        server.cleanup()


def new_postgres_database(server) -> str:
    """The URL of a new, empty database on the server."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server.get_uri(), autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return server.get_uri(name)


# What makes a test slow: the real model, a server over it, PostgreSQL, Chromium or Ray, used
# through one of these fixtures or built by the test module itself. `make test-fast` leaves
# such tests out (-m "not slow"); `make test` runs everything.
SLOW_FIXTURES = frozenset({"llm_fp32", "default_model_path", "postgres_server", "server"})
SLOW_MODULE_TEXT = (
    "LLMEngine(",
    "LLM(",
    "build_app(",
    "start_server(",
    "subprocess",
    "import ray",
    "ragserve.cluster.deploy",
    "playwright",
)


# What must run alone (`make test` runs the rest on both cores first, then these one at a time):
# a test whose pass depends on how fast the machine answers (the soak's refusal latency and its
# load's timing), and Ray's (one local cluster on the machine at a time).
SERIAL_PATHS = ("tests/reliability/test_soak.py", "tests/cluster/")


def _builds_slow_parts(module) -> bool:
    source = inspect.getsource(module)
    return any(text in source for text in SLOW_MODULE_TEXT)


def pytest_collection_modifyitems(config, items):
    slow_modules: dict[str, bool] = {}
    for item in items:
        name = item.module.__name__
        if name not in slow_modules:
            slow_modules[name] = _builds_slow_parts(item.module)
        params = getattr(item, "callspec", None)
        if (
            slow_modules[name]
            or SLOW_FIXTURES & set(item.fixturenames)
            or (params is not None and "postgres" in params.params.values())
        ):
            item.add_marker(pytest.mark.slow)
        if item.nodeid.startswith(SERIAL_PATHS):
            item.add_marker(pytest.mark.serial)
