"""Folder sources kept in sync (rag/sources/), on both stores: the first sync adds every file;
a re-sync costs a stat per unchanged file, re-embeds only changed chunks, deletes what is
gone, re-permissions on an ACL-map change, and finds documents a dead sync left unrecorded."""

import os

import pytest

from ragserve.rag.documents import AccessFilter
from ragserve.rag.ingest import Ingestor
from ragserve.rag.sources.registry import SourceConfig, SourceRegistry
from ragserve.rag.sources.sync import SourceSync, source_doc_id

TENANT = "acme"
EVERYTHING = AccessFilter(TENANT, "operator", (), everything=True)
MAP = {"default": {"groups": ["staff"]}, "rules": [{"path": "hr/*", "groups": ["hr"]}]}


def paragraph(n: int, words: int = 60) -> str:
    return " ".join(f"word{n}x{i}" for i in range(words)) + "."


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "share"
    (root / "hr").mkdir(parents=True)
    (root / "notes").mkdir()
    for n in range(12):
        (root / "notes" / f"note{n}.md").write_text(
            f"# Note {n}\n\n" + "\n\n".join(paragraph(n * 10 + p) for p in range(4))
        )
    for n in range(3):
        (root / "hr" / f"salary{n}.txt").write_text(f"Salary band {n}. " + paragraph(900 + n))
    (root / ".hidden.txt").write_text("never synced")
    return root


@pytest.fixture
def syncing(store_factory, embedder, tmp_path, folder):
    store = store_factory(embedder.dimension)
    registry = SourceRegistry(tmp_path / "sources.sqlite")
    config = SourceConfig("share", str(folder), TENANT, "admin", MAP)
    registry.add(config)
    yield SourceSync(store, Ingestor(store, embedder), registry), config, store
    registry.close()


def readable(store, *groups: str) -> set[str]:
    reader = AccessFilter(TENANT, "someone", groups)
    return {d.source for d in store.list_documents(reader)}


def touch_later(path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_a_resync_does_only_what_changed(syncing, folder):
    sync, config, store = syncing
    first = sync.run(config)
    assert (first.added, first.changed, first.deleted, first.failed) == (15, 0, 0, [])
    assert first.embedded_chunks > 15
    assert readable(store, "hr") == {f"hr/salary{n}.txt" for n in range(3)}
    note = store.get_document(EVERYTHING, source_doc_id(config, "notes/note0.md"))
    assert note.source_modified_at == (folder / "notes" / "note0.md").stat().st_mtime
    again = sync.run(config)
    assert (again.unchanged, again.added, again.changed, again.embedded_chunks) == (15, 0, 0, 0)

    # One paragraph of one note changes (one chunk's text), one note is rewritten with the
    # same text, one is deleted, one added, and the HR rule now also grants managers.
    edited = folder / "notes" / "note1.md"
    edited.write_text(edited.read_text().replace("word12x5 ", "changed "))
    touch_later(folder / "notes" / "note2.md")
    (folder / "notes" / "note3.md").unlink()
    (folder / "notes" / "new.md").write_text("# New\n\n" + paragraph(777))
    config.acl_map = {
        "default": MAP["default"],
        "rules": [{"path": "hr/*", "groups": ["hr", "managers"]}],
    }
    before = {d.source: d.version for d in store.list_documents(EVERYTHING)}
    note1 = source_doc_id(config, "notes/note1.md")
    note1_before = {c.text for c in store.document_chunks(EVERYTHING, note1)}
    third = sync.run(config)
    assert (third.added, third.changed, third.deleted) == (1, 1, 1)
    assert third.repermissioned == 3 and third.unchanged == 15 - 1 - 1 - 3
    chunks = {
        path: [c.text for c in store.document_chunks(EVERYTHING, source_doc_id(config, path))]
        for path in ("notes/note1.md", "notes/new.md")
    }
    changed = [t for t in chunks["notes/note1.md"] if t not in note1_before]
    assert 1 <= len(changed) < len(chunks["notes/note1.md"])
    assert third.embedded_chunks == len(changed) + len(chunks["notes/new.md"])
    after = {d.source: d.version for d in store.list_documents(EVERYTHING)}
    assert after["notes/note2.md"] == before["notes/note2.md"], "same text: nothing written"
    assert after["notes/note1.md"] == before["notes/note1.md"] + 1
    assert "notes/note3.md" not in after
    assert readable(store, "managers") == {f"hr/salary{n}.txt" for n in range(3)}
    assert "notes/new.md" in readable(store, "staff") and ".hidden.txt" not in after


def test_a_bad_file_is_reported_and_the_rest_synced(syncing, folder):
    sync, config, _ = syncing
    (folder / "notes" / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    report = sync.run(config)
    assert report.added == 15
    assert [f["path"] for f in report.failed] == ["notes/broken.pdf"]
    assert report.failed[0]["reason"]


def test_documents_a_dead_sync_left_unrecorded_are_still_deleted(syncing, folder, tmp_path):
    sync, config, store = syncing
    sync.run(config)
    # As if the process died after writing note5's document but before recording it.
    sync.registry.forget(config, "notes/note5.md")
    (folder / "notes" / "note5.md").unlink()
    report = sync.run(config)
    assert report.deleted == 1
    assert "notes/note5.md" not in {d.source for d in store.list_documents(EVERYTHING)}


def test_a_missing_folder_deletes_nothing(syncing, folder):
    sync, config, store = syncing
    sync.run(config)
    config.folder = str(folder / "unmounted")
    with pytest.raises(FileNotFoundError):
        sync.run(config)
    assert len(store.list_documents(EVERYTHING)) == 15


def test_the_source_s_documents_are_found_by_their_id_prefix_alone(syncing, folder, monkeypatch):
    """A sync reads the tenant's listing from its prefix on, page by page, and stops past it:
    documents around it (ids before and after, another source's) are neither counted nor
    deleted."""
    from ragserve.rag.sources import sync as sync_module
    from tests.rag.conftest import make_document

    sync, config, store = syncing
    monkeypatch.setattr(sync_module, "LISTING_PAGE", 2)
    vectors = [[1.0] + [0.0] * (store.dimension - 1)]
    for doc_id in ("a-upload", "source:other:1", "source:sharf:1", "zz-upload"):
        store.write_document(*make_document(doc_id, [f"{doc_id} text"], vectors, tenant=TENANT))
    assert sync.run(config).added == 15
    (folder / "notes" / "note7.md").unlink()
    again = sync.run(config)
    assert (again.deleted, again.unchanged) == (1, 14)
    left = {d.doc_id for d in store.list_documents(EVERYTHING)}
    assert {"a-upload", "source:other:1", "source:sharf:1", "zz-upload"} <= left
    assert len(left) == 4 + 14
