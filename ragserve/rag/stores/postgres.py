"""The scale-out store: PostgreSQL with pgvector, keyword postings for BM25.

The ACL condition is in the WHERE clause of every read. Keyword search reads the postings of
the query's terms for permitted chunks only, with the permitted chunks' count and length, and
scores them with rag.keyword (the same scores as the SQLite store). Vector search is an exact
scan of the permitted chunks: an approximate index (HNSW) would find neighbours through a graph
that every tenant's chunks shape, so what a reader gets back would depend on chunks that reader
cannot read. Both orders are total (score, then insertion order), so the plan PostgreSQL picks
cannot change them.
"""

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from ragserve.audit import AUDIT_COLUMNS, AuditEntry, check_page
from ragserve.rag.documents import (
    DEFAULT_VERSIONS_KEPT,
    AccessFilter,
    Acl,
    ChunkRecord,
    DocumentRecord,
    ScoredChunk,
)
from ragserve.rag.keyword import bm25_top, query_terms, term_counts
from ragserve.rag.stores.postgres_schema import insert_postings, migrate
from ragserve.rag.stores.rows import (
    CHUNK_COLUMNS,
    DOCUMENT_COLUMNS,
    DOCUMENT_SELECT,
    VERSION_COLUMNS,
    VERSION_SELECT,
    chunk_values,
    document_from_row,
    document_values,
    version_from_row,
    version_values,
)
from ragserve.rag.stores.sql import SqlStore

ACL_CONDITION = """d.tenant = %(tenant)s AND (%(everything)s OR d.owner = %(user)s OR EXISTS (
    SELECT 1 FROM rs_doc_acl a WHERE a.tenant = d.tenant AND a.doc_id = d.doc_id AND (
        (a.kind = 'user' AND a.name = %(user)s)
        OR (a.kind = 'group' AND a.name = ANY(%(groups)s)))))"""

CURRENT_CHUNKS = """rs_chunks c JOIN rs_documents d
    ON d.tenant = c.tenant AND d.doc_id = c.doc_id AND d.version = c.version"""

SCORED_CHUNK_SELECT = "c.chunk_id, c.doc_id, d.title, d.source, c.idx, c.start, c.stop, c.text"

# A search's chunks: the reader's documents first (materialized, so the planner cannot start
# from the chunks), then their current chunks through rs_chunks_by_doc.
READABLE_CHUNKS = f"""WITH d AS MATERIALIZED (
    SELECT d.tenant, d.doc_id, d.version, d.title, d.source FROM rs_documents d
    WHERE {ACL_CONDITION})
SELECT {{columns}} FROM d JOIN rs_chunks c
    ON c.tenant = d.tenant AND c.doc_id = d.doc_id AND c.version = d.version"""


def access_params(access: AccessFilter) -> dict[str, object]:
    return {
        "tenant": access.tenant,
        "user": access.user,
        "groups": list(access.groups),
        "everything": access.everything,
    }


class PostgresStore(SqlStore):
    def __init__(
        self, url: str, dimension: int, versions_kept: int = DEFAULT_VERSIONS_KEPT
    ) -> None:
        self.dimension = dimension
        self.versions_kept = versions_kept
        self._db = psycopg.connect(url, autocommit=True)
        # psycopg prepares a statement run five times, and PostgreSQL may then keep one generic
        # plan for any parameters: for a search that is a plan blind to how many chunks the
        # reader's ACL admits and how common the query's terms are (3x slower, measured).
        self._db.execute("SET plan_cache_mode = force_custom_plan")
        self._lock = threading.RLock()
        migrate(self._db, dimension)
        register_vector(self._db)
        stored = int(self._meta("dimension"))
        if stored != dimension:
            raise ValueError(f"the database holds {stored}-dimensional embeddings, not {dimension}")

    def _meta(self, key: str) -> str:
        return self._db.execute("SELECT value FROM rs_meta WHERE key = %s", (key,)).fetchone()[0]

    @contextmanager
    def _transaction(self, write: bool = False) -> Iterator[psycopg.Connection]:
        with self._lock, self._db.transaction():
            yield self._db

    def _bump_version(self) -> None:
        self._db.execute(
            "UPDATE rs_meta SET value = (value::bigint + 1)::text WHERE key = 'index_version'"
        )

    def index_version(self) -> str:
        with self._lock:
            return "pg:" + self._meta("index_version")

    def _store_name(self) -> str:
        return "pg"

    def _mark_changed(self, tenant: str, doc_id: str) -> None:
        self._db.execute(
            "UPDATE rs_documents SET changed = (SELECT value::bigint FROM rs_meta"
            " WHERE key = 'index_version') WHERE tenant = %s AND doc_id = %s",
            (tenant, doc_id),
        )

    def _visible_summary(self, access: AccessFilter) -> tuple[int, int]:
        count, newest = self._db.execute(
            "SELECT COUNT(*), COALESCE(MAX(d.changed), 0) FROM rs_documents d"
            f" WHERE {ACL_CONDITION}",
            access_params(access),
        ).fetchone()
        return count, newest

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # The SqlStore hooks.

    def _stored_version(self, tenant: str, doc_id: str, for_update: bool) -> int:
        row = self._db.execute(
            "SELECT version FROM rs_documents WHERE tenant = %s AND doc_id = %s"
            + (" FOR UPDATE" if for_update else ""),
            (tenant, doc_id),
        ).fetchone()
        return row[0] if row else 0

    def _insert_chunks(self, document: DocumentRecord, chunks: list[ChunkRecord]) -> None:
        indexed = [(chunk, *term_counts(chunk.text)) for chunk in chunks]
        with self._db.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO rs_chunks ({', '.join(CHUNK_COLUMNS)})"
                f" VALUES ({', '.join('%s' for _ in CHUNK_COLUMNS)})",
                [chunk_values(document, chunk, length) for chunk, _, length in indexed],
            )
        insert_postings(self._db, [(chunk.chunk_id, counts) for chunk, counts, _ in indexed])

    def _remove_chunks(self, tenant: str, doc_id: str, version: int | None = None) -> None:
        condition = "tenant = %s AND doc_id = %s" + (" AND version = %s" if version else "")
        params = (tenant, doc_id, version) if version else (tenant, doc_id)
        self._db.execute(f"DELETE FROM rs_chunks WHERE {condition}", params)

    def _upsert_document(self, document: DocumentRecord) -> None:
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in DOCUMENT_COLUMNS[2:])
        self._db.execute(
            f"INSERT INTO rs_documents ({', '.join(DOCUMENT_COLUMNS)})"
            f" VALUES ({', '.join('%s' for _ in DOCUMENT_COLUMNS)})"
            f" ON CONFLICT (tenant, doc_id) DO UPDATE SET {updates}",
            document_values(document),
        )

    def _remove_document(self, tenant: str, doc_id: str) -> None:
        for table in ("rs_doc_acl", "rs_documents"):
            self._db.execute(
                f"DELETE FROM {table} WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
            )

    def _replace_acl(self, tenant: str, doc_id: str, acl: Acl) -> None:
        self._db.execute(
            "DELETE FROM rs_doc_acl WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
        )
        rows = [(tenant, doc_id, *entry) for entry in acl.entries()]
        if rows:
            with self._db.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO rs_doc_acl (tenant, doc_id, kind, name, permission)"
                    " VALUES (%s, %s, %s, %s, %s)",
                    rows,
                )

    def _append_audit(self, entry: AuditEntry) -> None:
        self._db.execute(
            f"INSERT INTO rs_audit ({', '.join(AUDIT_COLUMNS)})"
            f" VALUES ({', '.join('%s' for _ in AUDIT_COLUMNS)})",
            entry.row(),
        )

    def _audit(self, tenant: str | None, before: float | None, limit: int) -> list[AuditEntry]:
        rows = self._db.execute(
            f"SELECT {', '.join(AUDIT_COLUMNS)} FROM rs_audit"
            " WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)"
            " AND (%(before)s::float8 IS NULL OR at < %(before)s)"
            " ORDER BY at DESC, seq DESC LIMIT %(limit)s",
            {"tenant": tenant, "before": before, "limit": check_page(limit)},
        ).fetchall()
        return [AuditEntry.from_row(row) for row in rows]

    def _insert_version(self, document: DocumentRecord, replaced_at: float) -> None:
        self._db.execute(
            f"INSERT INTO rs_document_versions ({', '.join(VERSION_COLUMNS)})"
            f" VALUES ({', '.join('%s' for _ in VERSION_COLUMNS)})",
            version_values(document, replaced_at),
        )

    def _versions(self, tenant: str, doc_id: str) -> list[DocumentRecord]:
        rows = self._db.execute(
            f"SELECT {VERSION_SELECT}, (SELECT COUNT(*) FROM rs_chunks c"
            "  WHERE c.tenant = v.tenant AND c.doc_id = v.doc_id AND c.version = v.version)"
            " FROM rs_document_versions v WHERE v.tenant = %s AND v.doc_id = %s"
            " ORDER BY v.version DESC",
            (tenant, doc_id),
        ).fetchall()
        return [version_from_row(row) for row in rows]

    def _remove_versions(self, tenant: str, doc_id: str, through: int | None) -> None:
        if through is None:
            self._db.execute(
                "DELETE FROM rs_document_versions WHERE tenant = %s AND doc_id = %s",
                (tenant, doc_id),
            )
            return
        self._db.execute(
            "DELETE FROM rs_chunks WHERE tenant = %s AND doc_id = %s AND version IN"
            " (SELECT version FROM rs_document_versions"
            "  WHERE tenant = %s AND doc_id = %s AND version <= %s)",
            (tenant, doc_id, tenant, doc_id, through),
        )
        self._db.execute(
            "DELETE FROM rs_document_versions WHERE tenant = %s AND doc_id = %s AND version <= %s",
            (tenant, doc_id, through),
        )

    def _chunk_records(self, tenant: str, doc_id: str, version: int) -> list[ChunkRecord]:
        rows = self._db.execute(
            "SELECT chunk_id, doc_id, idx, start, stop, text, content_hash, embedding"
            " FROM rs_chunks WHERE tenant = %s AND doc_id = %s AND version = %s ORDER BY idx",
            (tenant, doc_id, version),
        ).fetchall()
        return [
            ChunkRecord(*row[:-1], embedding=row[-1].to_numpy().astype(np.float32)) for row in rows
        ]

    def _documents(
        self,
        access: AccessFilter,
        doc_ids: list[str] | None,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[DocumentRecord]:
        where = ACL_CONDITION + (" AND d.doc_id = ANY(%(doc_ids)s)" if doc_ids is not None else "")
        where += " AND d.doc_id > %(after)s" if after is not None else ""
        rows = self._db.execute(
            f"SELECT {DOCUMENT_SELECT},"
            " (SELECT COUNT(*) FROM rs_chunks c WHERE c.tenant = d.tenant"
            "  AND c.doc_id = d.doc_id AND c.version = d.version),"
            " (SELECT json_agg(json_build_array(a.kind, a.name, a.permission)) FROM rs_doc_acl a"
            "  WHERE a.tenant = d.tenant AND a.doc_id = d.doc_id)"
            f" FROM rs_documents d WHERE {where} ORDER BY d.doc_id"
            + (" LIMIT %(limit)s" if limit is not None else ""),
            {"doc_ids": doc_ids, "after": after, "limit": limit, **access_params(access)},
        ).fetchall()
        documents = []
        for row in rows:
            acl_rows = row[-1] if isinstance(row[-1], list) else json.loads(row[-1] or "[]")
            documents.append(document_from_row(row[:-1], acl_rows))
        return documents

    # Reads

    def chunk_embeddings(self, tenant: str, doc_id: str) -> dict[str, np.ndarray]:
        with self._transaction():
            rows = self._db.execute(
                f"SELECT c.content_hash, c.embedding FROM {CURRENT_CHUNKS}"
                " WHERE c.tenant = %s AND c.doc_id = %s",
                (tenant, doc_id),
            ).fetchall()
        return {h: v.to_numpy().astype(np.float32) for h, v in rows}

    def document_chunks(self, access: AccessFilter, doc_id: str) -> list[ScoredChunk]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {SCORED_CHUNK_SELECT}, 0.0, c.version FROM {CURRENT_CHUNKS}"
                f" WHERE c.doc_id = %(doc_id)s AND {ACL_CONDITION} ORDER BY c.idx",
                {"doc_id": doc_id, **access_params(access)},
            ).fetchall()
        return [ScoredChunk(*row[:-1], version=row[-1]) for row in rows]

    def keyword_search(self, access: AccessFilter, query: str, k: int) -> list[ScoredChunk]:
        wanted = query_terms(query)
        if not wanted:
            return []
        params = {"terms": wanted, **access_params(access)}
        with self._search() as db:
            rows = db.execute(
                READABLE_CHUNKS.format(columns="c.id, c.tokens, t.term, t.count")
                + " LEFT JOIN rs_postings t ON t.chunk = c.id AND t.term = ANY(%(terms)s)",
                params,
            ).fetchall()
            lengths = {key: length for key, length, _, _ in rows}
            postings = [(term, key, n, length) for key, length, term, n in rows if term]
            scored = bm25_top(postings, len(lengths), sum(lengths.values()), k)
            scores = dict(scored)
            rows = db.execute(
                f"SELECT c.id, {SCORED_CHUNK_SELECT}, c.version FROM {CURRENT_CHUNKS}"
                f" WHERE c.id = ANY(%(ids)s) AND {ACL_CONDITION}",
                {"ids": list(scores), **params},
            ).fetchall()
        by_id = {
            row[0]: ScoredChunk(*row[1:-1], score=scores[row[0]], version=row[-1]) for row in rows
        }
        return [by_id[key] for key, _ in scored if key in by_id]

    def vector_search(self, access: AccessFilter, vector: np.ndarray, k: int) -> list[ScoredChunk]:
        columns = f"{SCORED_CHUNK_SELECT}, 1 - (c.embedding <=> %(q)s) AS score, c.version"
        with self._search() as db:
            rows = db.execute(
                READABLE_CHUNKS.format(columns=columns) + " ORDER BY score DESC, c.id LIMIT %(k)s",
                {"q": np.asarray(vector, dtype=np.float32), "k": k, **access_params(access)},
            ).fetchall()
        return [ScoredChunk(*row[:-1], version=row[-1]) for row in rows]

    @contextmanager
    def _search(self) -> Iterator[psycopg.Connection]:
        """A search's transaction: one snapshot for all its statements, and one access path.
        A plan chosen by cost comes from statistics over every tenant's rows, and a hash join
        or a sequential scan would start at every chunk, or at a term's postings in every
        tenant, so the search's time would tell about rows the reader cannot read. With these
        off, it runs from the reader's documents (an index scan of the tenant's) to their
        chunks to each chunk's postings, and its cost grows with what the reader may read and
        with the tenant's document count only."""
        with self._transaction() as db:
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            for method in ("hashjoin", "mergejoin", "seqscan"):
                db.execute(f"SET LOCAL enable_{method} = off")
            yield db
