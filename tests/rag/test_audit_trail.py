"""The document store's audit trail, both backends: every change leaves one entry written in
its own transaction, nothing else does, and reads filter by tenant and page by time."""

import json

import pytest

from ragserve.audit import AuditAction
from ragserve.rag.documents import AccessFilter, Acl
from tests.rag.conftest import make_document
from tests.rag.test_store_contract import ADMIN, ENG, OWNER, axis

WRITER = AccessFilter("acme", "wes", ("eng",))


def test_each_change_is_recorded_with_who_what_and_version(store_factory):
    store = store_factory()
    acl = Acl.of(groups={"eng": "write"})
    store.write_document(*make_document("doc", ["first text"], [axis(0)], acl=acl))
    again, chunks = make_document("doc", ["second text", "more"], [axis(1), axis(2)])
    again.keep_acl = True
    store.write_document(again, chunks, writer=WRITER, replaces=True)
    assert store.set_acl(OWNER, "doc", Acl.of(groups={"eng": "write"}))
    assert store.delete_document(WRITER, "doc")
    store.write_document(*make_document("elsewhere", ["t"], [axis(0)], tenant="globex"))

    log = store.audit_log("acme")
    assert [(e.action, e.actor, e.target, e.version) for e in log] == [
        (AuditAction.DOCUMENT_DELETE, "wes", "doc", 2),
        (AuditAction.ACL_CHANGE, "owner", "doc", 2),
        (AuditAction.DOCUMENT_WRITE, "wes", "doc", 2),
        (AuditAction.DOCUMENT_WRITE, "owner", "doc", 1),
    ]
    delete, acl_change, rewrite, first = (json.loads(e.detail) for e in log)
    assert first["acl"] == {"users": {}, "groups": {"eng": "write"}} and first["chunks"] == 1
    assert rewrite["acl"] is None, "a re-ingest that keeps the ACL records that it did"
    assert rewrite["chunks"] == 2 and rewrite["owner"] == "owner"
    assert acl_change["previous"] == first["acl"]
    assert acl_change["acl"] == {"users": {}, "groups": {"eng": "write"}}
    assert delete["source"] == "doc.txt"
    assert all(e.tenant == "acme" for e in log)
    assert [e.tenant for e in store.audit_log(None)].count("globex") == 1
    times = [e.at for e in log]
    assert times == sorted(times, reverse=True)


def test_refused_changes_leave_no_entry(store_factory):
    store = store_factory()
    store.write_document(*make_document("doc", ["text"], [axis(0)], acl=Acl.of(groups=["eng"])))
    assert not store.delete_document(ENG, "doc"), "a reader may not delete"
    assert not store.set_acl(ENG, "doc", Acl()), "nor change the ACL"
    assert not store.delete_document(ADMIN, "missing")
    assert [e.action for e in store.audit_log("acme")] == [AuditAction.DOCUMENT_WRITE]


def test_a_failed_write_leaves_neither_change_nor_entry(store_factory, monkeypatch):
    store = store_factory()
    store.write_document(*make_document("doc", ["old body"], [axis(0)]))

    def crash(*args, **kwargs):
        raise RuntimeError("power cut")

    # The entry is appended last: a crash there must roll the whole write back.
    monkeypatch.setattr(store, "_append_audit", crash)
    with pytest.raises(RuntimeError):
        store.write_document(*make_document("doc", ["new body"], [axis(1)]))
    with pytest.raises(RuntimeError):
        store.delete_document(OWNER, "doc")
    monkeypatch.undo()
    assert store.get_document(OWNER, "doc").version == 1
    assert [c.text for c in store.keyword_search(OWNER, "body", 5)] == ["old body"]
    assert len(store.audit_log("acme")) == 1


def test_paging_back_with_before(store_factory):
    store = store_factory()
    for i in range(5):
        store.write_document(*make_document(f"d{i}", ["text"], [axis(i)]))
    first = store.audit_log("acme", limit=2)
    second = store.audit_log("acme", limit=2, before=first[-1].at)
    rest = store.audit_log("acme", limit=10, before=second[-1].at)
    assert [e.target for e in first + second + rest] == ["d4", "d3", "d2", "d1", "d0"]
    with pytest.raises(ValueError, match="limit"):
        store.audit_log("acme", limit=0)
