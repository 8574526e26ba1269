"""The store protocol. Two backends implement it: stores/sqlite.py (embedded default) and
stores/postgres.py (PostgreSQL + pgvector). Every read takes an AccessFilter and applies it
inside its query; there is no unfiltered read."""

from typing import Protocol

import numpy as np

from ragserve.rag.documents import AccessFilter, Acl, ChunkRecord, DocumentRecord, ScoredChunk


class Store(Protocol):
    def chunk_embeddings(self, tenant: str, doc_id: str) -> dict[str, np.ndarray]:
        """Embeddings of the document's current chunks by content hash, for reuse."""
        ...

    def current_version(self, tenant: str, doc_id: str) -> int:
        """The stored version of a document, 0 if there is none."""
        ...

    def write_document(self, document: DocumentRecord, chunks: list[ChunkRecord]) -> None:
        """Store document.version and remove the one before it, in one transaction."""
        ...

    def delete_document(self, access: AccessFilter, doc_id: str) -> bool: ...

    def set_acl(self, access: AccessFilter, doc_id: str, acl: Acl) -> bool: ...

    def get_document(self, access: AccessFilter, doc_id: str) -> DocumentRecord | None: ...

    def list_documents(self, access: AccessFilter) -> list[DocumentRecord]: ...

    def keyword_search(self, access: AccessFilter, query: str, k: int) -> list[ScoredChunk]: ...

    def vector_search(
        self, access: AccessFilter, vector: np.ndarray, k: int
    ) -> list[ScoredChunk]: ...

    def index_version(self) -> str:
        """Changes on every write, delete and ACL change."""
        ...

    def close(self) -> None: ...


def open_store(url: str, dimension: int) -> Store:
    """A store from a URL: a path or sqlite:///path, or postgresql://..."""
    if url.startswith(("postgresql://", "postgres://")):
        from ragserve.rag.stores.postgres import PostgresStore

        return PostgresStore(url, dimension)
    from ragserve.rag.stores.sqlite import SqliteStore

    return SqliteStore(url.removeprefix("sqlite:///").removeprefix("sqlite://"), dimension)
