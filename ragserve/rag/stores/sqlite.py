"""The embedded store: one SQLite file with keyword postings for BM25 and exact cosine search
in numpy.

The ACL condition is part of every read query (a join against the ACL rows). Keyword search
reads the postings of the query's terms for permitted chunks only, with the permitted chunks'
count and length, and scores them with rag.keyword. Vector search asks SQLite for the permitted
chunk ids, then scores only those rows of an in-memory matrix of every current chunk's
embedding, reloaded when the index version moves.
"""

import json
import sqlite3
import threading
import uuid
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np

from ragserve.audit import (
    AuditEntry,
    append_restores,
    append_sqlite,
    read_sqlite,
    sqlite_audit_rows,
)
from ragserve.rag.documents import (
    DEFAULT_VERSIONS_KEPT,
    AccessFilter,
    Acl,
    ChunkRecord,
    DocumentRecord,
    ScoredChunk,
)
from ragserve.rag.keyword import bm25_top, query_terms, term_counts
from ragserve.rag.stores import sqlite_versions
from ragserve.rag.stores.rows import (
    CHUNK_COLUMNS,
    DOCUMENT_COLUMNS,
    DOCUMENT_SELECT,
    chunk_values,
    document_from_row,
    document_values,
)
from ragserve.rag.stores.sql import SqlStore
from ragserve.rag.stores.sqlite_matrix import EmbeddingMatrix
from ragserve.rag.stores.sqlite_schema import insert_postings, migrate
from ragserve.sqlite_db import connect, restore_database, transaction

# Visible documents `d` for the reader in the named parameters (see AccessFilter).
ACL_CONDITION = """d.tenant = :tenant AND (:everything OR d.owner = :user OR EXISTS (
    SELECT 1 FROM doc_acl a WHERE a.tenant = d.tenant AND a.doc_id = d.doc_id AND (
        (a.kind = 'user' AND a.name = :user)
        OR (a.kind = 'group' AND a.name IN (SELECT value FROM json_each(:groups))))))"""

# A chunk's document, in its current version only.
DOCUMENT_OF_CHUNK = (
    "JOIN documents d ON d.tenant = c.tenant AND d.doc_id = c.doc_id AND d.version = c.version"
)
CURRENT_CHUNKS = f"chunks c {DOCUMENT_OF_CHUNK}"
# The same, for searches: CROSS JOIN keeps SQLite's order, from the reader's documents to their
# chunks, so a search's cost grows with what the reader may read and the tenant's document
# count, never with other documents' chunks or text.
READABLE_CHUNKS = (
    "documents d CROSS JOIN chunks c"
    " ON c.tenant = d.tenant AND c.doc_id = d.doc_id AND c.version = d.version"
)


def access_params(access: AccessFilter) -> dict[str, object]:
    return {
        "tenant": access.tenant,
        "user": access.user,
        "groups": json.dumps(list(access.groups)),
        "everything": int(access.everything),
    }


class SqliteStore(SqlStore):
    def __init__(
        self, path: str | Path, dimension: int, versions_kept: int = DEFAULT_VERSIONS_KEPT
    ) -> None:
        path = Path(path)
        self.path = path
        self.dimension = dimension
        self.versions_kept = versions_kept
        self._db = connect(path)
        self._lock = threading.RLock()
        migrate(self._db, self._lock)
        with self._transaction(write=True):
            self._db.execute(
                "INSERT OR IGNORE INTO meta VALUES ('store_id', ?), ('index_version', '0'),"
                " ('dimension', ?)",
                (uuid.uuid4().hex, str(dimension)),
            )
        stored = int(self._meta("dimension"))
        if stored != dimension:
            raise ValueError(f"{path} holds {stored}-dimensional embeddings, not {dimension}")
        self._vectors = EmbeddingMatrix(dimension)

    def _transaction(self, write: bool = False) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self._db, self._lock, write)

    def _meta(self, key: str) -> str:
        return self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0]

    def _bump_version(self) -> None:
        self._db.execute(
            "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'index_version'"
        )

    def index_version(self) -> str:
        with self._transaction():
            return f"{self._meta('store_id')}:{self._meta('index_version')}"

    def _store_name(self) -> str:
        return self._meta("store_id")

    def _mark_changed(self, tenant: str, doc_id: str) -> None:
        self._db.execute(
            "UPDATE documents SET changed = (SELECT CAST(value AS INTEGER) FROM meta"
            " WHERE key = 'index_version') WHERE tenant = ? AND doc_id = ?",
            (tenant, doc_id),
        )

    def _visible_summary(self, access: AccessFilter) -> tuple[int, int]:
        count, newest = self._db.execute(
            f"SELECT COUNT(*), COALESCE(MAX(d.changed), 0) FROM documents d WHERE {ACL_CONDITION}",
            access_params(access),
        ).fetchone()
        return count, newest

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def restore_from(self, backup: Path, actor: str) -> None:
        """Replace the store's content with a backup's while it may be in use (see
        restore_database). The store keeps its id and its index version moves past both its
        own and the backup's, so nothing cached from either (in this process or a server using
        the file) passes for the restored content. Each tenant's audit trail records the restore
        and keeps what it recorded since the backup."""
        with self._transaction():
            live_version = int(self._meta("index_version"))
            store_id = self._meta("store_id")
            tenants = {row[0] for row in self._db.execute("SELECT tenant FROM documents")}
            trail = sqlite_audit_rows(self._db)

        def prepare(staged: Path) -> None:
            restored = SqliteStore(staged, self.dimension, self.versions_kept)  # migrates
            try:
                with restored._transaction(write=True) as db:
                    version = max(live_version, int(restored._meta("index_version"))) + 1
                    db.execute("UPDATE meta SET value = ? WHERE key = 'index_version'", (version,))
                    # Restored documents are new to every reader (see visible_version).
                    db.execute("UPDATE documents SET changed = ?", (version,))
                    db.execute("UPDATE meta SET value = ? WHERE key = 'store_id'", (store_id,))
                    counts = dict(
                        db.execute("SELECT tenant, COUNT(*) FROM documents GROUP BY tenant")
                    )
                    counts = dict.fromkeys(tenants, 0) | counts
                    append_restores(db, actor, str(backup), counts, "documents", trail)
            finally:
                restored.close()

        restore_database(backup, self.path, prepare)

    # The SqlStore hooks.

    def _stored_version(self, tenant: str, doc_id: str, for_update: bool) -> int:
        # BEGIN IMMEDIATE already holds the write lock: for_update needs nothing more.
        row = self._db.execute(
            "SELECT version FROM documents WHERE tenant = ? AND doc_id = ?", (tenant, doc_id)
        ).fetchone()
        return row[0] if row else 0

    def _insert_chunks(self, document: DocumentRecord, chunks: list[ChunkRecord]) -> None:
        insert = (
            f"INSERT INTO chunks ({', '.join(CHUNK_COLUMNS)})"
            f" VALUES ({', '.join('?' for _ in CHUNK_COLUMNS)})"
        )
        for chunk in chunks:
            counts, length = term_counts(chunk.text)
            *values, embedding = chunk_values(document, chunk, length)
            cursor = self._db.execute(insert, (*values, embedding.tobytes()))
            insert_postings(self._db, cursor.lastrowid, counts)

    def _remove_chunks(self, tenant: str, doc_id: str, version: int | None = None) -> None:
        condition = "tenant = ? AND doc_id = ?" + (" AND version = ?" if version else "")
        params = (tenant, doc_id, version) if version else (tenant, doc_id)
        self._db.execute(
            f"DELETE FROM postings WHERE chunk IN (SELECT rowid FROM chunks WHERE {condition})",
            params,
        )
        self._db.execute(f"DELETE FROM chunks WHERE {condition}", params)

    def _upsert_document(self, document: DocumentRecord) -> None:
        self._db.execute(
            f"INSERT OR REPLACE INTO documents ({', '.join(DOCUMENT_COLUMNS)})"
            f" VALUES ({', '.join('?' for _ in DOCUMENT_COLUMNS)})",
            document_values(document),
        )

    def _remove_document(self, tenant: str, doc_id: str) -> None:
        for table in ("doc_acl", "documents"):
            self._db.execute(
                f"DELETE FROM {table} WHERE tenant = ? AND doc_id = ?", (tenant, doc_id)
            )

    def _replace_acl(self, tenant: str, doc_id: str, acl: Acl) -> None:
        self._db.execute("DELETE FROM doc_acl WHERE tenant = ? AND doc_id = ?", (tenant, doc_id))
        self._db.executemany(
            "INSERT INTO doc_acl (tenant, doc_id, kind, name, permission) VALUES (?, ?, ?, ?, ?)",
            [(tenant, doc_id, *entry) for entry in acl.entries()],
        )

    def _append_audit(self, entry: AuditEntry) -> None:
        append_sqlite(self._db, entry)

    def _audit(self, tenant: str | None, before: float | None, limit: int) -> list[AuditEntry]:
        return read_sqlite(self._db, tenant, before, limit)

    def _insert_version(self, document: DocumentRecord, replaced_at: float) -> None:
        sqlite_versions.insert(self._db, document, replaced_at)

    def _versions(self, tenant: str, doc_id: str) -> list[DocumentRecord]:
        return sqlite_versions.listed(self._db, tenant, doc_id)

    def _remove_versions(self, tenant: str, doc_id: str, through: int | None) -> None:
        if through is not None:
            for version in sqlite_versions.numbers(self._db, tenant, doc_id, through):
                self._remove_chunks(tenant, doc_id, version)
        sqlite_versions.forget(self._db, tenant, doc_id, through)

    def _chunk_records(self, tenant: str, doc_id: str, version: int) -> list[ChunkRecord]:
        return sqlite_versions.chunk_records(self._db, tenant, doc_id, version)

    def _documents(
        self,
        access: AccessFilter,
        doc_ids: list[str] | None,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[DocumentRecord]:
        where = ACL_CONDITION
        if doc_ids is not None:
            where += " AND d.doc_id IN (SELECT value FROM json_each(:doc_ids))"
        where += " AND d.doc_id > :after" if after is not None else ""
        rows = self._db.execute(
            f"SELECT {DOCUMENT_SELECT},"
            " (SELECT COUNT(*) FROM chunks c WHERE c.tenant = d.tenant AND c.doc_id = d.doc_id"
            "  AND c.version = d.version)"
            f" FROM documents d WHERE {where} ORDER BY d.doc_id"
            + (" LIMIT :limit" if limit is not None else ""),
            {
                "doc_ids": json.dumps(doc_ids),
                "after": after,
                "limit": limit,
                **access_params(access),
            },
        ).fetchall()
        documents = []
        for row in rows:
            acl_rows = self._db.execute(
                "SELECT kind, name, permission FROM doc_acl WHERE tenant = ? AND doc_id = ?",
                (row[0], row[1]),
            ).fetchall()
            documents.append(document_from_row(row, acl_rows))
        return documents

    # Reads

    def chunk_embeddings(self, tenant: str, doc_id: str) -> dict[str, np.ndarray]:
        with self._transaction():
            rows = self._db.execute(
                f"SELECT c.content_hash, c.embedding FROM {CURRENT_CHUNKS}"
                " WHERE c.tenant = ? AND c.doc_id = ?",
                (tenant, doc_id),
            ).fetchall()
        return {h: np.frombuffer(blob, dtype=np.float32) for h, blob in rows}

    def document_chunks(self, access: AccessFilter, doc_id: str) -> list[ScoredChunk]:
        with self._transaction():
            rows = self._db.execute(
                "SELECT c.chunk_id, c.doc_id, d.title, d.source, c.idx, c.start, c.stop, c.text,"
                f" 0.0, c.version FROM {CURRENT_CHUNKS}"
                f" WHERE c.doc_id = :doc_id AND {ACL_CONDITION} ORDER BY c.idx",
                {"doc_id": doc_id, **access_params(access)},
            ).fetchall()
        return [ScoredChunk(*row[:-1], version=row[-1]) for row in rows]

    def keyword_search(self, access: AccessFilter, query: str, k: int) -> list[ScoredChunk]:
        wanted = query_terms(query)
        if not wanted:
            return []
        # One pass over the reader's chunks gives the statistics and the postings.
        with self._transaction():
            rows = self._db.execute(
                f"SELECT c.rowid, c.tokens, t.term, t.count FROM {READABLE_CHUNKS}"
                " LEFT JOIN postings t ON t.chunk = c.rowid"
                " AND t.term IN (SELECT value FROM json_each(:terms))"
                f" WHERE {ACL_CONDITION}",
                {"terms": json.dumps(wanted), **access_params(access)},
            ).fetchall()
            lengths = {rowid: length for rowid, length, _, _ in rows}
            postings = [(term, rowid, n, length) for rowid, length, term, n in rows if term]
            scored = bm25_top(postings, len(lengths), sum(lengths.values()), k)
            return self._scored_rows(access, scored)

    def _scored_rows(
        self, access: AccessFilter, scored: list[tuple[int, float]]
    ) -> list[ScoredChunk]:
        """The chunks of (rowid, score) pairs, in that order, the ACL checked again."""
        scores = dict(scored)
        found = self._db.execute(
            "SELECT c.rowid, c.chunk_id, c.doc_id, d.title, d.source, c.idx, c.start, c.stop,"
            f" c.text, c.version FROM {CURRENT_CHUNKS} WHERE c.rowid IN"
            f" (SELECT value FROM json_each(:rowids)) AND {ACL_CONDITION}",
            {"rowids": json.dumps(list(scores)), **access_params(access)},
        ).fetchall()
        by_rowid = {
            row[0]: ScoredChunk(*row[1:-1], score=scores[row[0]], version=row[-1]) for row in found
        }
        return [by_rowid[rowid] for rowid, _ in scored if rowid in by_rowid]

    def vector_search(self, access: AccessFilter, vector: np.ndarray, k: int) -> list[ScoredChunk]:
        with self._transaction():
            self._vectors.refresh(self._db, self._meta("index_version"), CURRENT_CHUNKS)
            permitted = np.sort(
                np.array(
                    [
                        r[0]
                        for r in self._db.execute(
                            f"SELECT c.rowid FROM {READABLE_CHUNKS} WHERE {ACL_CONDITION}",
                            access_params(access),
                        )
                    ],
                    dtype=np.int64,
                )
            )
            if not len(permitted):
                return []
            return self._scored_rows(access, self._vectors.top(permitted, vector, k))
