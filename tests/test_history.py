"""The query history store: askers hashed (or named), feedback only by the asker, expiry, and
which entries become QA records."""

import time

from ragserve.history import HistoryEntry, QueryHistory


def entry(entry_id: str, tenant: str = "acme", at: float | None = None, **fields) -> HistoryEntry:
    values = {
        "question": "Q?",
        "history": [],
        "answer": "A.",
        "mode": "extractive",
        "refused": False,
        "citations": [{"doc_id": "d1", "title": "Doc one", "quote": "A."}],
        "latency_ms": 5.0,
    } | fields
    return HistoryEntry(entry_id, tenant, "", at or time.time(), **values)


def test_askers_are_hashed_per_tenant_unless_named(tmp_path):
    history = QueryHistory(tmp_path / "h.sqlite", 30, identities=False)
    history.record(entry("a1"), "ines")
    history.record(entry("a2", tenant="globex"), "ines")
    (acme,), (globex,) = history.page("acme", 10), history.page("globex", 10)
    assert acme.user != "ines" and acme.user != globex.user
    named = QueryHistory(tmp_path / "n.sqlite", 30, identities=True)
    named.record(entry("a3"), "ines")
    assert named.page("acme", 10)[0].user == "ines"


def test_only_the_asker_rates_and_old_entries_expire(tmp_path):
    history = QueryHistory(tmp_path / "h.sqlite", 1, identities=False)
    history.record(entry("old", at=time.time() - 2 * 86400), "ines")
    history.record(entry("new"), "ines")
    assert [e.id for e in history.all("acme")] == ["new"]
    assert history.rate("acme", "ivo", "new", "up", None, None) is None
    assert history.rate("globex", "ines", "new", "up", None, None) is None
    assert history.rate("acme", "ines", "new", "down", "wrong", "B.").expected == "B."
    off = QueryHistory(tmp_path / "off.sqlite", 0, identities=False)
    off.record(entry("x"), "ines")
    assert off.all("acme") == [] and not off.enabled


def test_only_labelled_entries_become_qa_records():
    assert entry("u").as_qa() is None
    confirmed = entry("c", rating="up").as_qa()
    assert confirmed["answers"] == ["A."] and confirmed["gold_doc"] == "Doc one"
    corrected = entry("d", rating="down", expected="B.", history=["Earlier?"]).as_qa()
    assert corrected["answers"] == ["B."] and corrected["type"] == "followup"
    refusal = entry("r", rating="up", refused=True, citations=[]).as_qa()
    assert refusal["kind"] == "unanswerable" and refusal["gold_doc"] is None
    assert entry("n", rating="down", refused=True, citations=[]).as_qa() is None
