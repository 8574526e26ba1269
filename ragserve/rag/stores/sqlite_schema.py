"""The embedded store's tables, and what a store made by an earlier version gains on open."""

import sqlite3
import threading

from ragserve.audit import SQLITE_AUDIT_SCHEMA
from ragserve.rag.keyword import term_counts
from ragserve.sqlite_db import transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    tenant TEXT NOT NULL, doc_id TEXT NOT NULL, owner TEXT NOT NULL, source TEXT NOT NULL,
    title TEXT NOT NULL, content_hash TEXT NOT NULL, version INTEGER NOT NULL,
    ingested_at REAL NOT NULL, text_length INTEGER NOT NULL, changed INTEGER NOT NULL DEFAULT 0,
    source_modified_at REAL, PRIMARY KEY (tenant, doc_id)
);
CREATE TABLE IF NOT EXISTS doc_acl (
    tenant TEXT NOT NULL, doc_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('user', 'group')), name TEXT NOT NULL,
    permission TEXT NOT NULL DEFAULT 'read' CHECK (permission IN ('read', 'write', 'manage')),
    PRIMARY KEY (tenant, doc_id, kind, name)
);
CREATE INDEX IF NOT EXISTS doc_acl_by_name ON doc_acl (kind, name);
CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY, chunk_id TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL, version INTEGER NOT NULL, idx INTEGER NOT NULL, start INTEGER NOT NULL,
    stop INTEGER NOT NULL, text TEXT NOT NULL, content_hash TEXT NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0, embedding BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks (tenant, doc_id, version);
-- Replaced versions kept (their chunks stay in chunks): what each was and the ACL it had.
CREATE TABLE IF NOT EXISTS document_versions (
    tenant TEXT NOT NULL, doc_id TEXT NOT NULL, version INTEGER NOT NULL, owner TEXT NOT NULL,
    source TEXT NOT NULL, title TEXT NOT NULL, content_hash TEXT NOT NULL,
    ingested_at REAL NOT NULL, text_length INTEGER NOT NULL, source_modified_at REAL,
    acl TEXT NOT NULL,
    replaced_at REAL NOT NULL, PRIMARY KEY (tenant, doc_id, version)
);
"""

# Created after the chunks table has its `tokens` column (older stores gain it on open).
KEYWORD_SCHEMA = """
-- Keyed by chunk first: a search reads the postings of the reader's chunks, never a term's
-- postings across every tenant (whose length would show in the search's time).
CREATE TABLE IF NOT EXISTS postings (
    chunk INTEGER NOT NULL, term TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (chunk, term)
) WITHOUT ROWID;
"""


def insert_postings(db: sqlite3.Connection, rowid: int, counts: dict[str, int]) -> None:
    """A chunk's keyword postings: each term's count in it."""
    db.executemany(
        "INSERT INTO postings (chunk, term, count) VALUES (?, ?, ?)",
        [(rowid, term, count) for term, count in counts.items()],
    )


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def migrate(db: sqlite3.Connection, lock: threading.RLock) -> None:
    """Create the tables, or bring an older store's up to date. Idempotent."""
    db.executescript(SCHEMA + SQLITE_AUDIT_SCHEMA)  # commits on its own
    with transaction(db, lock, write=True):
        if "permission" not in _columns(db, "doc_acl"):  # before permission levels: all read
            db.execute(
                "ALTER TABLE doc_acl ADD COLUMN permission TEXT NOT NULL DEFAULT 'read'"
                " CHECK (permission IN ('read', 'write', 'manage'))"
            )
        if "changed" not in _columns(db, "documents"):  # before visible_version
            db.execute("ALTER TABLE documents ADD COLUMN changed INTEGER NOT NULL DEFAULT 0")
        if "source_modified_at" not in _columns(db, "documents"):  # before synced sources
            db.execute("ALTER TABLE documents ADD COLUMN source_modified_at REAL")
        if "tokens" not in _columns(db, "chunks"):
            db.execute("ALTER TABLE chunks ADD COLUMN tokens INTEGER NOT NULL DEFAULT 0")
        for statement in KEYWORD_SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        if db.execute("SELECT 1 FROM meta WHERE key = 'postings'").fetchone():
            return
        # A store from before keyword postings ranked with FTS5, whose statistics span every
        # tenant: its chunks get postings once, and the FTS5 table goes.
        for rowid, text in db.execute("SELECT rowid, text FROM chunks").fetchall():
            counts, length = term_counts(text)
            insert_postings(db, rowid, counts)
            db.execute("UPDATE chunks SET tokens = ? WHERE rowid = ?", (length, rowid))
        db.execute("DROP TABLE IF EXISTS chunks_fts")
        db.execute("INSERT INTO meta VALUES ('postings', '1')")
