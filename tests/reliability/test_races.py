"""Concurrent writers and readers (`ragserve eval races`): the violation check on hand-made
histories, and a short race on each store against a live in-process server."""

import json
import math

import pytest

from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.reliability import race_report, races
from ragserve.reliability.race_history import Hit, Operation, ReaderScope, check
from ragserve.settings import Settings
from tests.conftest import new_postgres_database

RED = ReaderScope(frozenset({"red"}))
SCOPES = {"red": RED, "outsider": ReaderScope(frozenset({"red"}), same_tenant=False)}


def created(start: float = 0.0, end: float = 1.0, groups=("red",)) -> Operation:
    return Operation("create", "w", start, end, 201, "a", revision=1, groups=frozenset(groups))


def search(start: float, end: float, revision: int = 1, reader: str = "red") -> Operation:
    return Operation("search", reader, start, end, 200, hits=[Hit("a", revision, "chunk", "a")])


def kinds(history: list[Operation]) -> list[str]:
    return [v.kind for v in check(history, SCOPES)]


def test_a_read_after_a_completed_delete_that_returns_the_document_is_a_violation():
    delete = Operation("delete", "w", 2.0, 3.0, 200, "a")
    violations = check([created(), delete, search(4.0, 5.0)], SCOPES)
    assert [(v.kind, v.blocker) for v in violations] == [("deleted", delete)]


def test_a_read_that_started_before_the_delete_completed_may_still_see_the_document():
    delete = Operation("delete", "w", 2.0, 3.0, 200, "a")
    assert kinds([created(), delete, search(2.5, 5.0)]) == []
    assert kinds([created(), delete, search(1.5, 2.5)]) == []


@pytest.mark.parametrize(
    ("later", "read", "expected"),
    [
        # An ACL change that revokes the reader's group, completed before the read started.
        ([Operation("acl", "w", 2, 3, 200, "a", groups=frozenset({"blue"}))], (4, 5), "forbidden"),
        # The same, but still running when the read started: either order is possible.
        ([Operation("acl", "w", 2, 4.5, 200, "a", groups=frozenset({"blue"}))], (4, 5), None),
        # Revoked, then granted again by a change that began before the read ended.
        (
            [
                Operation("acl", "w", 2, 3, 200, "a", groups=frozenset()),
                Operation("acl", "w", 4.5, 6, 200, "a", groups=frozenset({"red"})),
            ],
            (4, 5),
            None,
        ),
        # A grant that failed with a 4xx changed nothing; one that got a 5xx may have applied.
        (
            [
                Operation("acl", "w", 2, 3, 200, "a", groups=frozenset()),
                Operation("acl", "w", 3.5, 3.8, 404, "a", groups=frozenset({"red"})),
            ],
            (4, 5),
            "forbidden",
        ),
        (
            [
                Operation("acl", "w", 2, 3, 200, "a", groups=frozenset()),
                Operation("acl", "w", 3.5, 3.8, 500, "a", groups=frozenset({"red"})),
            ],
            (4, 5),
            None,
        ),
        # A newer revision committed before the read: the old text is stale.
        ([Operation("reingest", "w", 2, 3, 201, "a", revision=2)], (4, 5), "stale"),
        ([Operation("reingest", "w", 2, math.inf, 0, "a", revision=2)], (4, 5), None),
    ],
)
def test_acl_changes_and_revisions_against_the_read_span(later, read, expected):
    assert kinds([created(), *later, search(*read)]) == ([expected] if expected else [])


def test_never_granted_and_misattributed_text_are_violations():
    assert kinds([created(groups=("blue",)), search(4, 5)]) == ["forbidden"]
    assert kinds([created(), search(4, 5, reader="outsider")]) == ["forbidden"]
    # Created while the read ran: it could have been seen.
    assert kinds([created(3, 6), search(4, 5)]) == []
    wrong = Operation("search", "red", 4, 5, 200, hits=[Hit("a", 1, "chunk", "b")])
    assert kinds([created(), wrong]) == ["misattributed"]


@pytest.fixture(scope="module")
def engine() -> LLMEngine:
    # Extractive answers never call the model; a small KV pool keeps it light.
    return LLMEngine(EngineConfig(dtype="float32", kv_cache_memory_bytes=4096 * 46080))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_short_race_has_no_violation_and_no_server_error(
    backend, engine, embedder, tmp_path, request
):
    store = None
    if backend == "postgres":
        store = new_postgres_database(request.getfixturevalue("postgres_server"))
    settings = Settings(store=store)
    plan = races.RacePlan(duration_s=12, writers=3, readers=6, documents=6)
    report = races.run(settings, plan, engine, embedder)
    race_report.write(report, tmp_path / "out")

    summary = report["summary"]
    assert summary["violations"] == 0, report["violations"]
    operations = report["operations"]
    assert all(operations[kind]["applied"] for kind in operations), "every kind ran"
    assert summary["texts_checked"] > 0 and summary["unmarked_texts"] == 0
    saved = json.loads((tmp_path / "out" / "races.json").read_text())
    assert saved["summary"] == summary
    assert "# Concurrent writers and readers" in (tmp_path / "out" / "races.md").read_text()
    assert summary["5xx"] == 0 and summary["no_response"] == 0, report["errors"]
    assert summary["passed"], report["errors"]


def test_the_race_notices_deletes_that_delete_nothing(engine, embedder, monkeypatch):
    """The figures are only worth having if a broken server shows in them: acknowledge deletes
    without deleting, and the reads that still return those documents are violations."""
    from ragserve.rag.stores.sql import SqlStore

    monkeypatch.setattr(SqlStore, "delete_document", lambda self, *args, **kwargs: True)
    plan = races.RacePlan(duration_s=8, writers=3, readers=4, documents=6)
    report = races.run(Settings(), plan, engine, embedder)
    assert report["operations"]["delete"]["applied"] > 0
    assert report["violations"]["by_kind"].get("deleted", 0) > 0
    assert not report["summary"]["passed"]
