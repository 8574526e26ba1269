"""The scale-out store's tables, and what a database made by an earlier version gains on open."""

import psycopg

from ragserve.rag.keyword import term_counts

SCHEMA = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS rs_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rs_documents (
    tenant TEXT NOT NULL, doc_id TEXT NOT NULL, owner TEXT NOT NULL, source TEXT NOT NULL,
    title TEXT NOT NULL, content_hash TEXT NOT NULL, version INTEGER NOT NULL,
    ingested_at DOUBLE PRECISION NOT NULL, text_length INTEGER NOT NULL,
    PRIMARY KEY (tenant, doc_id)
);
ALTER TABLE rs_documents ADD COLUMN IF NOT EXISTS changed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rs_documents ADD COLUMN IF NOT EXISTS source_modified_at DOUBLE PRECISION;
CREATE TABLE IF NOT EXISTS rs_doc_acl (
    tenant TEXT NOT NULL, doc_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('user', 'group')), name TEXT NOT NULL,
    PRIMARY KEY (tenant, doc_id, kind, name)
);
-- Permission levels came later: entries of an older database become read grants.
ALTER TABLE rs_doc_acl ADD COLUMN IF NOT EXISTS permission TEXT NOT NULL DEFAULT 'read'
    CHECK (permission IN ('read', 'write', 'manage'));
CREATE INDEX IF NOT EXISTS rs_doc_acl_by_name ON rs_doc_acl (kind, name);
CREATE TABLE IF NOT EXISTS rs_chunks (
    id BIGSERIAL PRIMARY KEY, chunk_id TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL, version INTEGER NOT NULL, idx INTEGER NOT NULL,
    start INTEGER NOT NULL, stop INTEGER NOT NULL, text TEXT NOT NULL,
    content_hash TEXT NOT NULL, embedding vector({dimension}) NOT NULL
);
CREATE INDEX IF NOT EXISTS rs_chunks_by_doc ON rs_chunks (tenant, doc_id, version);
-- Keyword postings came later: they replace a tsvector column (ranked by ts_rank_cd) and an
-- HNSW index, which a database from before loses here.
ALTER TABLE rs_chunks ADD COLUMN IF NOT EXISTS tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rs_chunks DROP COLUMN IF EXISTS tsv;
DROP INDEX IF EXISTS rs_chunks_hnsw;
-- Keyed by chunk first: a search probes the postings of the reader's chunks, never a term's
-- postings across every tenant (whose length would show in the search's time); count rides
-- in the index, so a probe is an index-only scan.
CREATE TABLE IF NOT EXISTS rs_postings (
    chunk BIGINT NOT NULL REFERENCES rs_chunks (id) ON DELETE CASCADE,
    term TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (chunk, term) INCLUDE (count)
);
-- Replaced versions kept (their chunks stay in rs_chunks): what each was and the ACL it had.
CREATE TABLE IF NOT EXISTS rs_document_versions (
    tenant TEXT NOT NULL, doc_id TEXT NOT NULL, version INTEGER NOT NULL, owner TEXT NOT NULL,
    source TEXT NOT NULL, title TEXT NOT NULL, content_hash TEXT NOT NULL,
    ingested_at DOUBLE PRECISION NOT NULL, text_length INTEGER NOT NULL,
    source_modified_at DOUBLE PRECISION, acl TEXT NOT NULL,
    replaced_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (tenant, doc_id, version)
);
CREATE TABLE IF NOT EXISTS rs_audit (
    seq BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION NOT NULL, tenant TEXT NOT NULL,
    actor TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL, version INTEGER,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS rs_audit_by_tenant ON rs_audit (tenant, at);
"""


def migrate(db: psycopg.Connection, dimension: int) -> None:
    """Create the tables, or bring an older database's up to date. Idempotent, and safe for
    two processes opening one database at once."""
    db.execute(SCHEMA.replace("{dimension}", str(dimension)))
    db.execute(
        "INSERT INTO rs_meta VALUES ('index_version', '0'), ('dimension', %s)"
        " ON CONFLICT (key) DO NOTHING",
        (str(dimension),),
    )
    with db.transaction():
        # Two processes opening one old database: the second waits, then finds it done.
        db.execute("SELECT pg_advisory_xact_lock(hashtext('rs_postings'))")
        if db.execute("SELECT 1 FROM rs_meta WHERE key = 'postings'").fetchone() is None:
            _index_old_chunks(db)
            db.execute("INSERT INTO rs_meta VALUES ('postings', '1')")


def _index_old_chunks(db: psycopg.Connection) -> None:
    """Postings and lengths for the chunks of a database from before keyword postings."""
    indexed = [
        (chunk_id, *term_counts(text))
        for chunk_id, text in db.execute("SELECT chunk_id, text FROM rs_chunks")
    ]
    db.execute(
        "UPDATE rs_chunks c SET tokens = t.tokens"
        " FROM unnest(%s::text[], %s::int[]) AS t(chunk_id, tokens)"
        " WHERE c.chunk_id = t.chunk_id",
        ([chunk_id for chunk_id, _, _ in indexed], [n for _, _, n in indexed]),
    )
    insert_postings(db, [(chunk_id, counts) for chunk_id, counts, _ in indexed])


def insert_postings(db: psycopg.Connection, chunks: list[tuple[str, dict[str, int]]]) -> None:
    """Write the keyword postings of stored chunks, (chunk_id, term counts) pairs, in one
    statement."""
    rows = [(chunk_id, term, n) for chunk_id, counts in chunks for term, n in counts.items()]
    db.execute(
        "INSERT INTO rs_postings (chunk, term, count)"
        " SELECT c.id, t.term, t.count"
        " FROM unnest(%s::text[], %s::text[], %s::int[]) AS t(chunk_id, term, count)"
        " JOIN rs_chunks c ON c.chunk_id = t.chunk_id",
        ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
    )
