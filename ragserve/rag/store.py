"""The store protocol. Two backends implement it: stores/sqlite.py (embedded default) and
stores/postgres.py (PostgreSQL + pgvector). Every read takes an AccessFilter and applies it
inside its query; there is no unfiltered read."""

from typing import Protocol

import numpy as np

from ragserve.audit import AuditEntry
from ragserve.rag.documents import (
    DEFAULT_VERSIONS_KEPT,
    AccessFilter,
    Acl,
    ChunkRecord,
    DocumentRecord,
    ScoredChunk,
)


class Store(Protocol):
    """Documents, their ACLs and their chunks (text, span, embedding), versioned per document.

    Every read takes an AccessFilter and applies it inside its query, so a chunk or document the
    filter does not admit is never returned, not even to be dropped later. Writes are atomic: a
    reader sees a document's previous version or its new one, never a mix, and a crash leaves
    the previous one. Methods are safe to call from several threads.
    """

    def chunk_embeddings(self, tenant: str, doc_id: str) -> dict[str, np.ndarray]:
        """The embeddings of the document's current chunks by content hash ({} if there is no
        such document), so a re-ingest embeds only chunks whose text changed. No ACL check:
        ingestion calls it for a document it is about to write."""
        ...

    def current_version(self, tenant: str, doc_id: str) -> int:
        """The stored version of a document, 0 if there is none."""
        ...

    def write_document(
        self,
        document: DocumentRecord,
        chunks: list[ChunkRecord],
        writer: AccessFilter | None = None,
        replaces: bool = False,
    ) -> None:
        """Store the document as the version after the stored one, with its chunks, replacing
        the previous version (kept as an earlier version, see document_versions) and its ACL
        unless document.keep_acl, in one
        transaction that also appends its audit entry (by writer.user, or the owner). Sets
        document.version, .ingested_at and .num_chunks and each chunk's chunk_id.

        With a writer, the transaction checks that it may write a stored document (manage it
        when the ACL changes; a document stored meanwhile keeps its owner), and with replaces
        that the document still exists; else it raises WriteConflict and writes nothing.
        Without one, the caller answers for the permission (the operator, evaluation)."""
        ...

    def document_versions(self, access: AccessFilter, doc_id: str) -> list[DocumentRecord]:
        """The current version and the earlier versions kept (up to the store's
        versions_kept), newest first, each with the ACL it had: [] when the filter may not
        read the document now, and without the earlier versions whose own ACL did not admit
        the filter (a reader granted access later never sees what was there before)."""
        ...

    def version_chunks(
        self, access: AccessFilter, doc_id: str, version: int
    ) -> list[ChunkRecord] | None:
        """One version's chunks in order with their embeddings, if document_versions lists
        it for the filter; None otherwise."""
        ...

    def restore_version(
        self, access: AccessFilter, doc_id: str, version: int
    ) -> DocumentRecord | None:
        """Write an earlier version's text and chunks (embeddings reused) as the document's
        newest version, if the filter may manage the document and read that version; the ACL
        becomes the grants that the current ACL and the version's both make (at the lower
        level), so nobody reads what they could not read then or cannot read now. None (and
        nothing changed) otherwise."""
        ...

    def delete_document(self, access: AccessFilter, doc_id: str) -> bool:
        """Delete the document with its chunks, earlier versions and ACL if the filter may
        write it, with its
        audit entry; False (and nothing changed) if it does not exist or the filter may not
        write it."""
        ...

    def set_acl(self, access: AccessFilter, doc_id: str, acl: Acl) -> bool:
        """Replace the document's ACL if the filter may manage it, with its audit entry; False
        (nothing changed) otherwise. The owner is not part of the ACL and always keeps
        access."""
        ...

    def set_acls(self, access: AccessFilter, changes: list[tuple[str, Acl]]) -> list[str]:
        """set_acl for each (doc_id, acl) in one transaction (a source whose ACL map changed
        re-permissions thousands of documents); the ids changed, in order."""
        ...

    def audit_log(
        self, tenant: str | None, limit: int = 100, before: float | None = None
    ) -> list[AuditEntry]:
        """Audit entries newest first, of one tenant or of all (None), older than `before`
        (seconds since the epoch) when given; at most limit (1 to MAX_AUDIT_PAGE). Only
        administrators may be shown them: the caller checks."""
        ...

    def get_document(self, access: AccessFilter, doc_id: str) -> DocumentRecord | None:
        """The document with its ACL and chunk count, or None if it does not exist or the
        filter may not read it (the two are indistinguishable on purpose)."""
        ...

    def list_documents(
        self, access: AccessFilter, after: str | None = None, limit: int | None = None
    ) -> list[DocumentRecord]:
        """The documents of the filter's tenant it may read, ordered by doc_id: those after
        the doc_id `after` when given, at most limit. Paging by the last doc_id seen is
        stable under concurrent writes: a document that exists throughout is listed once,
        and the filter is applied inside the query, so no page depends on what it hides."""
        ...

    def document_chunks(self, access: AccessFilter, doc_id: str) -> list[ScoredChunk]:
        """The current chunks of one document in order (score 0), or [] if it does not exist
        or the filter may not read it."""
        ...

    def keyword_search(self, access: AccessFilter, query: str, k: int) -> list[ScoredChunk]:
        """Up to k permitted current chunks holding any term of the query, best first, scored
        by BM25 (rag.keyword) whose statistics (chunk count, average length, each term's
        document frequency) come from the permitted chunks alone, so no score or order depends
        on a chunk the filter does not admit. The query's terms are extracted (query_terms),
        so no query syntax reaches the database. Both backends give the same scores."""
        ...

    def vector_search(self, access: AccessFilter, vector: np.ndarray, k: int) -> list[ScoredChunk]:
        """Up to k permitted current chunks nearest the unit-length query vector, best first;
        the score is cosine similarity in [-1, 1] on both backends. Exact, not approximate: an
        index whose structure every tenant's chunks shape would make what comes back depend
        on them. Ties go to the older chunk on both."""
        ...

    def index_version(self) -> str:
        """An opaque string that changes on every write, delete and ACL change (and differs
        between stores)."""
        ...

    def visible_version(self, access: AccessFilter) -> str:
        """An opaque string that changes when what the filter may read changes (a readable
        document written, deleted, or granted or taken away by an ACL change) and on nothing
        else, so a response cache keyed on it forgets exactly the answers that may be stale,
        and a cache hit tells a reader nothing about documents it cannot read."""
        ...

    def close(self) -> None:
        """Release the connection; the store is unusable afterwards."""
        ...


def open_store(url: str, dimension: int, versions_kept: int = DEFAULT_VERSIONS_KEPT) -> Store:
    """A store from a URL: a path or sqlite:///path, or postgresql://..."""
    if url.startswith(("postgresql://", "postgres://")):
        from ragserve.rag.stores.postgres import PostgresStore

        return PostgresStore(url, dimension, versions_kept)
    from ragserve.rag.stores.sqlite import SqliteStore

    path = url.removeprefix("sqlite:///").removeprefix("sqlite://")
    return SqliteStore(path, dimension, versions_kept)
