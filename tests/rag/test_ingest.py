"""The ingestion path with the real embedder, on the SQLite store."""

import itertools

import pytest

from ragserve.rag.chunking import Chunker
from ragserve.rag.documents import AccessFilter, Acl
from ragserve.rag.ingest import Ingestor, SourceDocument
from ragserve.rag.parsers import parse_bytes
from ragserve.rag.stores.sqlite import SqliteStore

OWNER = AccessFilter("acme", "olga")


@pytest.fixture
def ingestor(embedder, tmp_path):
    store = SqliteStore(tmp_path / "index.sqlite", embedder.dimension)
    yield Ingestor(store, embedder, chunk_size=32, chunk_overlap=4)
    store.close()


def long_markdown(paragraphs: int) -> str:
    parts = ["# Handbook"]
    for i in range(paragraphs):
        if i % 4 == 0:
            parts.append(f"## Section {i // 4}")
        parts.append(
            f"Paragraph {i} explains rule number {i} about expenses and travel in "
            f"some detail, with enough words to matter for chunking decisions."
        )
    return "\n\n".join(parts) + "\n"


def test_chunks_keep_spans_and_respect_headings(embedder):
    text = long_markdown(12)
    parsed = parse_bytes(text.encode(), "handbook.md")
    chunker = Chunker(embedder.tokenizer, size=48, overlap=8)
    chunks = chunker.split(parsed)
    tokenizer = chunker.tokenizer
    assert len(chunks) > 5
    heading_starts = [b.start for b in parsed.blocks if b.heading]
    for chunk in chunks:
        assert text[chunk.start : chunk.end] == chunk.text
        assert len(tokenizer.encode(chunk.text, add_special_tokens=False).ids) <= 48
        # No chunk runs across a heading that starts after its own first character.
        assert not any(chunk.start < h < chunk.end for h in heading_starts), chunk.text
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_overlap_repeats_the_tail_of_the_previous_chunk(embedder):
    text = " ".join(f"word{i}" for i in range(400))
    parsed = parse_bytes(text.encode(), "flat.txt")
    chunks = Chunker(embedder.tokenizer, size=40, overlap=10).split(parsed)
    for earlier, later in itertools.pairwise(chunks):
        assert later.start < earlier.end, "consecutive chunks overlap"


def test_reingest_reuses_unchanged_embeddings(ingestor):
    first = ingestor.ingest(
        SourceDocument("handbook.md", long_markdown(12).encode()), "acme", "olga", Acl()
    )
    assert first.ok and first.version == 1 and first.embedded == first.chunks
    changed = long_markdown(12).replace("rule number 11", "rule number eleven (amended)")
    second = ingestor.ingest(SourceDocument("handbook.md", changed.encode()), "acme", "olga", Acl())
    assert second.doc_id == first.doc_id and second.version == 2
    assert 0 < second.embedded <= 3
    assert second.reused >= second.chunks - 3
    hits = ingestor.store.keyword_search(OWNER, "amended", 3)
    assert hits and "amended" in hits[0].text


def test_bad_file_in_a_batch_does_not_stop_the_rest(ingestor):
    items = [
        SourceDocument("good.txt", b"Lighthouses guide ships along dangerous coasts."),
        SourceDocument("bad.pdf", b"%PDF-1.4 not a pdf at all"),
        SourceDocument("also-good.md", b"# Bees\n\nBees make honey from nectar.\n"),
    ]
    results = ingestor.ingest_many(items, "acme", "olga", Acl())
    assert [r.ok for r in results] == [True, False, True]
    assert "bad.pdf" in results[1].error
    assert {d.source for d in ingestor.store.list_documents(OWNER)} == {"good.txt", "also-good.md"}


def test_delete_and_acl_change_visible_to_the_next_search(ingestor):
    ingestor.ingest(
        SourceDocument("memo.txt", b"The merger with Initech closes in March."),
        "acme",
        "olga",
        Acl.of(groups=["board"]),
    )
    board = AccessFilter("acme", "bob", ("board",))
    staff = AccessFilter("acme", "stan", ("staff",))
    doc_id = ingestor.store.list_documents(OWNER)[0].doc_id
    assert ingestor.store.keyword_search(board, "merger Initech", 3)
    assert not ingestor.store.keyword_search(staff, "merger Initech", 3)
    ingestor.store.set_acl(OWNER, doc_id, Acl.of(groups=["staff"]))
    assert not ingestor.store.keyword_search(board, "merger Initech", 3)
    assert ingestor.store.keyword_search(staff, "merger Initech", 3)
    ingestor.store.delete_document(OWNER, doc_id)
    assert not ingestor.store.keyword_search(staff, "merger Initech", 3)


def test_chunks_embed_in_calls_of_many_documents_in_order(ingestor, monkeypatch):
    """Documents' chunks are embedded together until a call holds EMBED_CALL_CHUNKS (the
    embedder sorts a call by length, so larger calls pad less); results keep the input order,
    failures included."""
    from ragserve.rag import ingest

    monkeypatch.setattr(ingest, "EMBED_CALL_CHUNKS", 5)
    calls = []
    embed = ingestor.embedder.embed_passages
    monkeypatch.setattr(
        ingestor.embedder, "embed_passages", lambda texts: calls.append(len(texts)) or embed(texts)
    )
    items = [
        SourceDocument(f"note-{i}.txt", f"Note {i} says {i} owls nest here.".encode())
        for i in range(12)
    ]
    items.insert(6, SourceDocument("broken.pdf", b"%PDF-1.4 not a pdf at all"))
    results = ingestor.ingest_many(items, "acme", "olga", Acl())
    assert [r.source for r in results] == [i.source for i in items]
    assert [r.ok for r in results] == [i.source != "broken.pdf" for i in items]
    assert calls == [5, 5, 2]
