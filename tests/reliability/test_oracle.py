"""`ragserve bench cache-oracle` against a live ragserve, on two trials."""

import pytest

from ragserve.access import Role
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.rag.documents import AccessFilter
from ragserve.reliability.oracle import Oracle, OracleSettings
from ragserve.settings import Settings
from tests.server.conftest import start_server

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedder):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), dtype="float32")
    engine = LLMEngine(EngineConfig(dtype="float32", kv_cache_memory_bytes=4096 * 46080))
    yield from start_server(settings, engine, embedder)


def test_cache_oracle_rebuilds_the_answer_prompt_and_finds_no_leak(server):
    settings = OracleSettings(
        server.url,
        server.key("root", role=Role.ADMIN),
        server.key("bob", ("staff", "board")),
        server.key("alice", ("staff",)),
        "board",
        MODEL,
        server.state.settings.answer_max_tokens,
        server.state.settings.evidence_budget_tokens,
        server.state.settings.datamark,
        evidence_sentences=server.state.settings.evidence_sentences,
        trials=2,
    )
    # Quoted answers never reach the model; the probe needs answers whose prompt it runs.
    answers = server.state.rag.answers
    answers.settings.style = "generate"
    try:
        report = Oracle(settings).run()
    finally:
        answers.settings.style = "quote"
    assert report["verified_trials"] == 2 and report["unverified_trials"] == 0
    assert report["right"]["cached_tokens"] == report["wrong"]["cached_tokens"]
    # The control repeats a prompt the outsider sent: all its full blocks come from the cache.
    repeat = report["control_repeat"]["cached_tokens"]["mean"]
    assert repeat >= report["wrong"]["cached_tokens"]["mean"] and repeat > 0
    admin = AccessFilter("default", "root", everything=True)
    left = [d.doc_id for d in server.state.rag.store.list_documents(admin) if "oracle" in d.doc_id]
    assert left == [], "the memos are deleted"
