"""Online backup and restore of the embedded store, while another connection uses it."""

import sqlite3
import threading

import pytest

from ragserve.rag.documents import Acl
from ragserve.rag.stores.sqlite import SqliteStore
from ragserve.sqlite_db import check_integrity, copy_database
from tests.rag.conftest import DIMENSION, make_document, unit
from tests.rag.test_store_contract import ADMIN, ENG, OWNER, axis


def snapshot(store: SqliteStore) -> dict:
    """Everything a reader can observe: documents, ACLs, chunks, and both searches."""
    return {
        "documents": [
            (d.doc_id, d.version, d.acl, d.num_chunks, d.content_hash)
            for d in store.list_documents(ADMIN)
        ],
        "chunks": sorted(
            (c.chunk_id, c.text, c.start, c.end) for c in store.keyword_search(ADMIN, "text", 100)
        ),
        "eng_sees": [c.chunk_id for c in store.vector_search(ENG, unit(axis(3)), 5)],
        "keyword": [c.chunk_id for c in store.keyword_search(ENG, "text number", 5)],
    }


def test_backup_while_writing_then_restore_into_a_store_in_use(tmp_path):
    live = SqliteStore(tmp_path / "index.sqlite", DIMENSION)
    for i in range(20):
        acl = Acl.of(groups=["eng"] if i % 2 else ["sales"])
        live.write_document(
            *make_document(
                f"d{i}", [f"text number {i}", f"more text {i}"], [axis(i), axis(i + 3)], acl=acl
            )
        )
    writing = threading.Event()
    writer = SqliteStore(tmp_path / "index.sqlite", DIMENSION)  # another connection, like a server

    def keep_writing() -> None:
        i = 100
        while not writing.is_set():
            writer.write_document(*make_document(f"d{i}", [f"text number {i}"], [axis(i)]))
            i += 1

    thread = threading.Thread(target=keep_writing)
    thread.start()
    try:
        copy_database(live.path, tmp_path / "backup.sqlite")
    finally:
        writing.set()
        thread.join()
    check_integrity(tmp_path / "backup.sqlite")
    backed_up = SqliteStore(tmp_path / "backup.sqlite", DIMENSION)
    expected = snapshot(backed_up)
    backed_up.close()
    assert len(expected["documents"]) >= 20

    # Change everything a restore must undo, and warm the reader's caches on it.
    assert live.delete_document(OWNER, "d1")
    assert live.set_acl(OWNER, "d3", Acl())
    live.write_document(*make_document("d5", ["replaced text"], [axis(9)]))
    before_restore = snapshot(writer)
    version_before = writer.index_version()

    live.restore_from(tmp_path / "backup.sqlite", actor="root")
    assert snapshot(live) == expected
    assert snapshot(writer) == expected, "an open connection sees the restored content"
    assert snapshot(writer) != before_restore
    assert writer.index_version() != version_before
    assert writer.index_version().split(":")[0] == version_before.split(":")[0], "same store id"
    restore, *earlier = live.audit_log("acme", limit=4)
    assert (restore.action, restore.actor) == ("store.restore", "root")
    assert [(e.action, e.target) for e in earlier] == [
        ("document.write", "d5"),
        ("document.acl", "d3"),
        ("document.delete", "d1"),
    ], "the trail keeps what happened after the backup"
    writer.close()
    live.close()


def test_a_corrupt_or_mismatched_backup_changes_nothing(tmp_path):
    live = SqliteStore(tmp_path / "index.sqlite", DIMENSION)
    live.write_document(*make_document("doc", ["text"], [axis(0)]))
    before = snapshot(live)
    (tmp_path / "garbage.sqlite").write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    with pytest.raises(ValueError, match=r"not a usable SQLite database|integrity"):
        live.restore_from(tmp_path / "garbage.sqlite", actor="root")
    other = SqliteStore(tmp_path / "other.sqlite", DIMENSION + 1)
    other.close()
    with pytest.raises(ValueError, match="dimensional"):
        live.restore_from(tmp_path / "other.sqlite", actor="root")
    assert snapshot(live) == before
    assert not list(tmp_path.glob("*.restoring*"))
    assert sqlite3.connect(live.path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    live.close()
