"""One contract, both backends (SQLite and a real PostgreSQL + pgvector)."""

import numpy as np
import pytest

from ragserve.rag.documents import AccessFilter, Acl, Permission
from tests.rag.conftest import DIMENSION, make_document, unit

OWNER = AccessFilter("acme", "owner")
ENG = AccessFilter("acme", "erin", ("eng",))
STRANGER = AccessFilter("acme", "sam", ("sales",))
OTHER_TENANT_OWNER = AccessFilter("globex", "owner", ("eng",))
ADMIN = AccessFilter("acme", "root", everything=True)


def axis(i: int) -> np.ndarray:
    v = np.zeros(DIMENSION)
    v[i % DIMENSION] = 1.0
    v[(i + 1) % DIMENSION] = 0.1
    return v


def seed(store):
    store.write_document(
        *make_document(
            "public",
            ["apples grow on trees in the orchard", "bananas are yellow"],
            [axis(0), axis(1)],
            acl=Acl.of(groups=["eng", "sales"]),
        )
    )
    store.write_document(
        *make_document(
            "secret",
            ["the launch code is hidden in the orchard vault"],
            [axis(0)],
            acl=Acl.of(groups=["eng"]),
        )
    )
    store.write_document(*make_document("private", ["owner notes about the orchard"], [axis(0)]))


def test_acl_semantics_fail_closed(store_factory):
    store = store_factory()
    seed(store)
    ids = lambda access: {d.doc_id for d in store.list_documents(access)}  # noqa: E731
    assert ids(OWNER) == {"public", "secret", "private"}
    assert ids(ENG) == {"public", "secret"}
    assert ids(STRANGER) == {"public"}
    assert ids(OTHER_TENANT_OWNER) == set()
    assert ids(ADMIN) == {"public", "secret", "private"}
    assert store.get_document(STRANGER, "secret") is None
    document = store.get_document(ENG, "secret")
    assert document.acl.groups == (("eng", Permission.READ),)
    assert document.num_chunks == 1 and document.version == 1


def test_searches_apply_the_acl_inside_the_query(store_factory):
    store = store_factory()
    seed(store)
    for access, expected in [(STRANGER, {"public"}), (ENG, {"public", "secret"})]:
        keyword = store.keyword_search(access, "orchard", 10)
        assert {c.doc_id for c in keyword} == expected & {"public", "secret"}
        dense = store.vector_search(access, unit(axis(0)), 10)
        assert {c.doc_id for c in dense} == expected
    hit = store.keyword_search(STRANGER, "apples orchard", 1)[0]
    assert hit.text == "apples grow on trees in the orchard"
    assert (hit.start, hit.end, hit.title) == (0, len(hit.text), "Title of public")
    assert store.keyword_search(STRANGER, "'; DROP TABLE chunks; --", 5) == []


def test_dense_search_ranks_by_cosine(store_factory):
    store = store_factory()
    seed(store)
    results = store.vector_search(OWNER, unit(axis(1)), 2)
    assert results[0].text == "bananas are yellow"
    assert results[0].score > results[1].score
    assert results[0].score == pytest.approx(1.0, abs=1e-3)


def test_selective_filter_still_returns_k(store_factory):
    store = store_factory()
    rng = np.random.default_rng(0)
    for i in range(60):
        acl = Acl.of(groups=["rare"]) if i % 10 == 0 else Acl.of(groups=["common"])
        store.write_document(
            *make_document(
                f"d{i}",
                [f"document {i} part {j}" for j in range(3)],
                [rng.normal(size=DIMENSION) for _ in range(3)],
                acl=acl,
            )
        )
    rare = AccessFilter("acme", "reader", ("rare",))
    results = store.vector_search(rare, unit(rng.normal(size=DIMENSION)), 10)
    assert len(results) == 10
    assert {r.doc_id for r in results} <= {f"d{i}" for i in range(0, 60, 10)}


def test_delete_and_acl_change_apply_to_the_next_query(store_factory):
    store = store_factory()
    seed(store)
    versions = [store.index_version()]
    assert store.set_acl(OWNER, "secret", Acl.of(groups={"sales": "write"}))
    versions.append(store.index_version())
    assert not store.keyword_search(ENG, "launch code", 5)
    assert store.keyword_search(STRANGER, "launch code", 5)[0].doc_id == "secret"
    assert not store.delete_document(ENG, "secret"), "invisible documents cannot be deleted"
    assert store.delete_document(STRANGER, "secret")
    versions.append(store.index_version())
    assert not store.keyword_search(OWNER, "launch code", 5)
    assert all(c.doc_id != "secret" for c in store.vector_search(STRANGER, unit(axis(0)), 5))
    assert store.get_document(OWNER, "secret") is None
    assert len(set(versions)) == 3


def test_permission_levels_gate_delete_and_acl_changes(store_factory):
    store = store_factory()
    grants = {"erin": "read", "wes": "write", "max": "manage"}
    store.write_document(*make_document("doc", ["the text"], [axis(0)], acl=Acl.of(grants)))
    reader, writer, manager = (AccessFilter("acme", user) for user in ("erin", "wes", "max"))
    before = store.index_version()
    assert not store.set_acl(reader, "doc", Acl())
    assert not store.delete_document(reader, "doc")
    assert not store.set_acl(writer, "doc", Acl())
    assert store.index_version() == before, "a refused change changes nothing"
    assert store.get_document(reader, "doc").acl == Acl.of(grants)
    assert reader.permission_on(store.get_document(reader, "doc")) is Permission.READ
    assert OWNER.permission_on(store.get_document(OWNER, "doc")) is Permission.MANAGE
    assert store.set_acl(manager, "doc", Acl.of({"max": "manage", "wes": "write"}))
    assert store.get_document(reader, "doc") is None
    # A write grant re-ingests and keeps the ACL as it is; it also deletes.
    document, chunks = make_document("doc", ["new text"], [axis(1)], acl=Acl())
    document.keep_acl = True
    store.write_document(document, chunks)
    assert store.get_document(OWNER, "doc").acl == Acl.of({"max": "manage", "wes": "write"})
    assert store.delete_document(writer, "doc")
    assert store.get_document(OWNER, "doc") is None


def test_new_version_replaces_the_old(store_factory):
    store = store_factory()
    store.write_document(*make_document("doc", ["first text", "shared text"], [axis(0), axis(1)]))
    store.write_document(*make_document("doc", ["second text", "shared text"], [axis(2), axis(1)]))
    document = store.get_document(OWNER, "doc")
    assert document.version == 2 and document.num_chunks == 2
    assert not store.keyword_search(OWNER, "first", 5)
    assert store.keyword_search(OWNER, "second", 5)
    embeddings = store.chunk_embeddings("acme", "doc")
    assert len(embeddings) == 2
    assert store.current_version("acme", "doc") == 2


def test_document_chunks_are_the_current_ones_in_order_and_only_for_readers(store_factory):
    store = store_factory()
    seed(store)
    store.write_document(*make_document("doc", ["one", "two", "three"], [axis(0)] * 3))
    store.write_document(*make_document("doc", ["uno", "dos"], [axis(1)] * 2))
    chunks = store.document_chunks(OWNER, "doc")
    assert [c.text for c in chunks] == ["uno", "dos"] and [c.index for c in chunks] == [0, 1]
    assert all(c.doc_id == "doc" and c.score == 0.0 for c in chunks)
    assert [c.start for c in chunks] == sorted(c.start for c in chunks)
    assert [c.text for c in store.document_chunks(ENG, "secret")] == [
        "the launch code is hidden in the orchard vault"
    ]
    assert store.document_chunks(STRANGER, "secret") == []
    assert store.document_chunks(OTHER_TENANT_OWNER, "public") == []
    assert store.document_chunks(OWNER, "missing") == []


def test_crash_between_write_and_delete_keeps_the_old_version(store_factory, monkeypatch):
    store = store_factory()
    store.write_document(*make_document("doc", ["old body"], [axis(0)]))
    before = store.index_version()

    def crash(*args, **kwargs):
        raise RuntimeError("power cut")

    monkeypatch.setattr(store, "_upsert_document", crash)
    with pytest.raises(RuntimeError):
        store.write_document(*make_document("doc", ["new body"], [axis(1)]))
    monkeypatch.undo()
    assert store.index_version() == before
    assert store.get_document(OWNER, "doc").version == 1
    assert [c.text for c in store.keyword_search(OWNER, "body", 5)] == ["old body"]
    assert [c.text for c in store.vector_search(OWNER, unit(axis(1)), 5)] == ["old body"]


def test_earlier_versions_are_kept_for_those_who_could_read_them(store_factory):
    """A reader granted access at version 2 sees versions 2 and 3, never version 1 (hr only),
    which no search returns either; a restore needs manage, brings version 1's chunks back as
    the newest version with their embeddings, under the grants both ACLs make; a delete takes
    every version."""
    store = store_factory()
    hana = AccessFilter("acme", "hana", ("hr",))
    hr, hr_and_eng = Acl.of(groups=["hr"]), Acl.of(groups=["hr", "eng"])
    bodies = [
        ["salary bands are kept secret", "shared introduction"],
        ["salary bands are published", "shared introduction"],
        ["salary bands are published yearly", "shared introduction"],
    ]
    for version, (texts, acl) in enumerate(
        zip(bodies, [hr, hr_and_eng, hr_and_eng], strict=True), 1
    ):
        store.write_document(*make_document("doc", texts, [axis(version), axis(0)], acl=acl))
    assert [v.version for v in store.document_versions(ENG, "doc")] == [3, 2]
    assert [v.version for v in store.document_versions(hana, "doc")] == [3, 2, 1]
    assert store.document_versions(hana, "doc")[2].acl == hr
    assert store.document_versions(STRANGER, "doc") == []
    assert store.version_chunks(ENG, "doc", 1) is None
    assert [c.text for c in store.version_chunks(hana, "doc", 1)] == bodies[0]
    assert not store.keyword_search(OWNER, "secret", 5)
    assert all(c.version == 3 for c in store.vector_search(OWNER, unit(axis(1)), 5))

    assert store.restore_version(ENG, "doc", 2) is None, "read is not manage"
    assert store.restore_version(OWNER, "doc", 7) is None
    restored = store.restore_version(ADMIN, "doc", 1)
    assert restored.version == 4 and restored.acl == hr
    assert [c.text for c in store.document_chunks(hana, "doc")] == bodies[0]
    assert store.get_document(ENG, "doc") is None, "eng could not read version 1"
    hits = store.keyword_search(OWNER, "secret", 5)
    assert [(c.doc_id, c.version) for c in hits] == [("doc", 4)]
    old = store.version_chunks(hana, "doc", 1)
    new = store.version_chunks(hana, "doc", 4)
    assert all(np.array_equal(a.embedding, b.embedding) for a, b in zip(old, new, strict=True))
    assert store.audit_log("acme", 1)[0].version == 4

    assert store.delete_document(OWNER, "doc")
    assert store.document_versions(ADMIN, "doc") == []
    assert store.version_chunks(ADMIN, "doc", 1) is None


@pytest.mark.parametrize("kept", [0, 2])
def test_versions_past_the_kept_count_are_forgotten_with_their_chunks(store_factory, kept):
    store = store_factory(versions_kept=kept)
    for n in range(1, 6):
        store.write_document(*make_document("doc", [f"body number {n}"], [axis(n)]))
    assert [v.version for v in store.document_versions(OWNER, "doc")] == list(
        range(5, 4 - kept, -1)
    )
    assert store._chunk_records("acme", "doc", 5 - kept - 1) == []
    assert [c.text for c in store.keyword_search(OWNER, "body", 5)] == ["body number 5"]


def test_a_store_from_before_permission_levels_opens_with_read_grants(tmp_path):
    import sqlite3

    from ragserve.rag.stores.sqlite import SqliteStore

    path = tmp_path / "old.sqlite"
    store = SqliteStore(path, DIMENSION)
    store.write_document(*make_document("doc", ["text"], [axis(0)], acl=Acl.of(groups=["eng"])))
    store.close()
    # Rebuild the ACL table as it was: no permission column.
    with sqlite3.connect(path) as db:
        db.executescript(
            "CREATE TABLE old_acl AS SELECT tenant, doc_id, kind, name FROM doc_acl;"
            "DROP TABLE doc_acl; ALTER TABLE old_acl RENAME TO doc_acl;"
        )
    store = SqliteStore(path, DIMENSION)
    document = store.get_document(ENG, "doc")
    assert document.acl == Acl.of(groups=["eng"])
    assert not store.delete_document(ENG, "doc")
    store.close()


def test_a_write_rechecks_its_writer_inside_the_transaction(store_factory):
    """A re-ingest is checked before its embedding and written after it; a delete or an ACL
    change landing in between must win, not be undone by the write."""
    from ragserve.rag.documents import WriteConflict

    store = store_factory()
    writer = AccessFilter("acme", "wes", ("eng",))
    acl = Acl.of(groups={"eng": "write"})
    store.write_document(*make_document("gone", ["first"], [axis(0)], acl=acl))
    store.write_document(*make_document("revoked", ["first"], [axis(0)], acl=acl))
    assert store.delete_document(OWNER, "gone")
    assert store.set_acl(OWNER, "revoked", Acl.of(groups=["eng"]))  # read only now
    entries = len(store.audit_log("acme"))
    for doc_id in ("gone", "revoked"):
        document, chunks = make_document(doc_id, ["second"], [axis(1)])
        document.keep_acl = True
        with pytest.raises(WriteConflict):
            store.write_document(document, chunks, writer=writer, replaces=True)
    assert store.get_document(OWNER, "gone") is None, "the delete stands"
    assert [c.text for c in store.keyword_search(OWNER, "first second", 5)] == ["first"]
    assert len(store.audit_log("acme")) == entries, "nothing written, nothing recorded"

    # Created by someone else meanwhile: the write becomes a re-ingest that keeps the owner.
    store.write_document(*make_document("raced", ["theirs"], [axis(2)], acl=acl))
    document, chunks = make_document("raced", ["mine"], [axis(3)], owner="wes")
    document.keep_acl = True
    store.write_document(document, chunks, writer=writer)
    stored = store.get_document(OWNER, "raced")
    assert (stored.owner, stored.version, stored.acl) == ("owner", 2, acl)


def test_visible_version_moves_with_what_the_reader_may_read_and_nothing_else(store_factory):
    store = store_factory()
    seed(store)
    versions: list[str] = []

    def moved() -> bool:
        versions.append(store.visible_version(STRANGER))
        return len(versions) > 1 and versions[-1] != versions[-2]

    moved()
    # Changes the stranger (group sales) cannot see: another group's, another tenant's.
    store.write_document(
        *make_document("eng-only", ["eng notes"], [axis(2)], acl=Acl.of(groups=["eng"]))
    )
    assert not moved()
    store.write_document(*make_document("other", ["globex notes"], [axis(2)], tenant="globex"))
    assert not moved()
    assert store.set_acl(OWNER, "secret", Acl.of(groups=["eng", "ops"]))
    assert not moved()
    assert store.delete_document(OWNER, "eng-only")
    assert not moved()
    # Changes to what the stranger reads: a grant, a new version, a revocation, a delete.
    assert store.set_acl(OWNER, "secret", Acl.of(groups=["sales"]))
    assert moved()
    store.write_document(
        *make_document(
            "public", ["apples", "pears"], [axis(0), axis(1)], acl=Acl.of(groups=["sales"])
        )
    )
    assert moved()
    assert store.set_acl(OWNER, "secret", Acl.of(groups=["eng"]))
    assert moved()
    assert store.delete_document(OWNER, "public")
    assert moved()
    assert store.visible_version(ENG) != store.visible_version(STRANGER)
