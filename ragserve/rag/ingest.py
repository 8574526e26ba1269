"""The ingestion path: parse -> chunk (with spans) -> attach source and ACL -> embed -> store.

Re-ingesting a document embeds only chunks whose text changed (matched by content hash) and
writes the new version in one store transaction. A file that fails to parse is reported and
skipped; the rest of the batch goes on, and nothing already stored is touched.
"""

import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragserve.rag.chunking import Chunker, ChunkSpan
from ragserve.rag.documents import AccessFilter, Acl, ChunkRecord, DocumentRecord, content_hash
from ragserve.rag.embeddings import Embedder
from ragserve.rag.parsers import ParsedDocument, ParseError, parse_bytes, unstorable
from ragserve.rag.store import Store

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_SIZE = 128
DEFAULT_CHUNK_OVERLAP = 16
# Chunks embedded in one call: the embedder sorts a call's texts by length into batches, and
# with a few hundred texts to sort its batches carry little padding (1,277 Wikipedia chunks
# embed 1.27x faster in one call than in calls of 80). A call also ends at this many documents,
# so that a sync of unchanged files still reports its progress as it goes.
EMBED_CALL_CHUNKS = 512
EMBED_CALL_DOCUMENTS = 512


@dataclass
class IngestResult:
    source: str
    doc_id: str | None = None
    version: int = 0
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    error: str | None = None
    # Left as stored: the same text and ACL (ingest_many's skip_unchanged).
    unchanged: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class SourceDocument:
    """One thing to ingest: raw bytes with a name, or parsed text."""

    source: str
    data: bytes | None = None
    parsed: ParsedDocument | None = None
    doc_id: str | None = None
    kind: str | None = None
    error: str | None = None
    # When its source last changed it (a synced file's modified time), if known.
    modified_at: float | None = None


def default_doc_id(tenant: str, owner: str, source: str) -> str:
    """Same tenant, owner and source, same document: re-ingesting a file updates it."""
    return hashlib.sha256(f"{tenant}\0{owner}\0{source}".encode()).hexdigest()[:16]


class Ingestor:
    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        allow_truncated_embeddings: bool = False,
    ) -> None:
        # Chunks beyond the embedder's window are embedded from their first tokens only (keyword
        # search still reads them whole); allowed only when asked, e.g. to measure that cost.
        if chunk_size > embedder.max_tokens and not allow_truncated_embeddings:
            raise ValueError(
                f"chunk size {chunk_size} exceeds the {embedder.max_tokens} tokens "
                f"{embedder.name} reads; longer chunks would be embedded cut short"
            )
        self.store = store
        self.embedder = embedder
        self.chunker = Chunker(embedder.tokenizer, chunk_size, chunk_overlap)

    def ingest(
        self,
        item: SourceDocument,
        tenant: str,
        owner: str,
        acl: Acl | None,
        writer: AccessFilter | None = None,
        replaces: bool = False,
    ) -> IngestResult:
        """Ingest one document; acl None keeps a stored document's ACL (a new one gets the
        owner alone). writer and replaces: see Store.write_document; a WriteConflict is
        raised, not reported."""
        return self.ingest_many([item], tenant, owner, acl, writer=writer, replaces=replaces)[0]

    def ingest_many(
        self,
        items: Iterable[SourceDocument],
        tenant: str,
        owner: str,
        acl: Acl | None,
        progress: Callable[[IngestResult], None] | None = None,
        writer: AccessFilter | None = None,
        replaces: bool = False,
        skip_unchanged: bool = False,
    ) -> list[IngestResult]:
        """Ingest in batches: the chunks of a batch's documents are embedded together. With
        skip_unchanged, a stored document with the same text and ACL is not written again."""
        results = []
        for batch in self._embedding_calls(items, tenant, owner, acl, skip_unchanged):
            self._embed_missing([p for p in batch if isinstance(p, _Prepared)])
            for entry in batch:
                result = (
                    self._write(entry, writer, replaces) if isinstance(entry, _Prepared) else entry
                )
                if not result.ok:
                    logger.warning("not ingested: %s", result.error)
                results.append(result)
                if progress is not None:
                    progress(result)
        return results

    def _embedding_calls(
        self,
        items: Iterable[SourceDocument],
        tenant: str,
        owner: str,
        acl: Acl | None,
        skip_unchanged: bool,
    ) -> Iterator[list["_Prepared | IngestResult"]]:
        """The items prepared, in order, in groups whose chunks are embedded in one call."""
        batch: list[_Prepared | IngestResult] = []
        chunks = 0
        for item in items:
            entry = self._prepare(item, tenant, owner, acl, skip_unchanged)
            batch.append(entry)
            chunks += len(entry.spans) if isinstance(entry, _Prepared) else 0
            if chunks >= EMBED_CALL_CHUNKS or len(batch) >= EMBED_CALL_DOCUMENTS:
                yield batch
                batch, chunks = [], 0
        if batch:
            yield batch

    def _prepare(
        self,
        item: SourceDocument,
        tenant: str,
        owner: str,
        acl: Acl | None,
        skip_unchanged: bool = False,
    ) -> "_Prepared | IngestResult":
        if item.error is not None:
            return IngestResult(item.source, error=item.error)
        # A file name that is not UTF-8 reaches here with surrogates (Python's surrogateescape);
        # the message quotes it with ascii() so that it can itself be printed and sent.
        if problem := unstorable(item.source):
            return IngestResult(item.source, error=f"{item.source!a}: the name has {problem}")
        try:
            parsed = item.parsed or parse_bytes(item.data or b"", item.source, item.kind)
        except ParseError as error:
            return IngestResult(item.source, error=str(error))
        # Text handed in parsed (JSON over HTTP) has not been through the parsers' checks.
        unchecked = (("text", parsed.text), ("title", parsed.title)) if item.parsed else ()
        for what, value in unchecked:
            if problem := unstorable(value):
                return IngestResult(item.source, error=f"{item.source}: the {what} has {problem}")
        doc_id = item.doc_id or default_doc_id(tenant, owner, item.source)
        if skip_unchanged and (same := self._stored_as(tenant, doc_id, parsed.text, acl)):
            return IngestResult(item.source, doc_id, same.version, same.num_chunks, unchanged=True)
        spans = self.chunker.split(parsed)
        document = DocumentRecord(
            doc_id=doc_id,
            tenant=tenant,
            owner=owner,
            source=item.source,
            title=parsed.title,
            content_hash=content_hash(parsed.text),
            acl=acl or Acl(),
            text_length=len(parsed.text),
            source_modified_at=item.modified_at,
            keep_acl=acl is None,
        )
        known = self.store.chunk_embeddings(tenant, doc_id)
        return _Prepared(document, spans, [content_hash(s.text) for s in spans], known)

    def _stored_as(
        self, tenant: str, doc_id: str, text: str, acl: Acl | None
    ) -> DocumentRecord | None:
        """The stored document when it has this text and ACL (None keeps any ACL)."""
        stored = self.store.get_document(AccessFilter(tenant, "ingest", everything=True), doc_id)
        if stored is None or stored.content_hash != content_hash(text):
            return None
        return stored if acl is None or stored.acl == acl else None

    def _embed_missing(self, prepared: list["_Prepared"]) -> None:
        texts: dict[str, str] = {}
        for entry in prepared:
            for span, digest in zip(entry.spans, entry.hashes, strict=True):
                if digest not in entry.known:
                    texts.setdefault(digest, span.text)
        if not texts:
            return
        vectors = dict(zip(texts, self.embedder.embed_passages(list(texts.values())), strict=True))
        for entry in prepared:
            entry.embedded = {h: vectors[h] for h in entry.hashes if h not in entry.known}

    def _write(
        self, entry: "_Prepared", writer: AccessFilter | None, replaces: bool
    ) -> IngestResult:
        vectors = {**entry.known, **entry.embedded}
        chunks = [
            ChunkRecord("", entry.document.doc_id, s.index, s.start, s.end, s.text, h, vectors[h])
            for s, h in zip(entry.spans, entry.hashes, strict=True)
        ]
        self.store.write_document(entry.document, chunks, writer, replaces)
        return IngestResult(
            source=entry.document.source,
            doc_id=entry.document.doc_id,
            version=entry.document.version,
            chunks=len(chunks),
            embedded=len(entry.embedded),
            reused=sum(1 for h in entry.hashes if h in entry.known),
        )


@dataclass
class _Prepared:
    """A parsed and chunked document waiting for its embeddings."""

    document: DocumentRecord
    spans: list[ChunkSpan]
    hashes: list[str]
    known: dict[str, np.ndarray]
    embedded: dict[str, np.ndarray] = field(default_factory=dict)


def read_sources(paths: Iterable[Path]) -> Iterable[SourceDocument]:
    """Files under the given paths (folders are walked), as SourceDocuments."""
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            try:
                yield SourceDocument(str(file), data=file.read_bytes())
            except OSError as error:
                yield SourceDocument(str(file), error=f"{file}: cannot read ({error.strerror})")
