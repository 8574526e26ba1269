import os
import uuid

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def llm_fp32():
    """The default model in float32, with a small KV pool (4096 tokens) to keep tests light."""
    from ragserve import LLM

    return LLM(dtype="float32", kv_cache_memory_bytes=4096 * 46080)


@pytest.fixture(scope="session")
def default_model_path(llm_fp32):
    return llm_fp32.engine.model_path


@pytest.fixture(scope="session")
def embedder():
    from ragserve.rag.embeddings import Embedder

    return Embedder()


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """A real PostgreSQL with pgvector, from the pgserver package."""
    pgserver = pytest.importorskip("pgserver")
    server = pgserver.get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="stop")
    yield server
    server.cleanup()


def new_postgres_database(server) -> str:
    """The URL of a new, empty database on the server."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server.get_uri(), autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return server.get_uri(name)
