"""The embedded store's earlier versions of documents (see stores/sql.py): their rows in
document_versions, and the chunks each kept in the chunks table under its version number."""

import sqlite3

import numpy as np

from ragserve.rag.documents import ChunkRecord, DocumentRecord
from ragserve.rag.stores.rows import (
    VERSION_COLUMNS,
    VERSION_SELECT,
    version_from_row,
    version_values,
)


def insert(db: sqlite3.Connection, document: DocumentRecord, replaced_at: float) -> None:
    db.execute(
        f"INSERT INTO document_versions ({', '.join(VERSION_COLUMNS)})"
        f" VALUES ({', '.join('?' for _ in VERSION_COLUMNS)})",
        version_values(document, replaced_at),
    )


def listed(db: sqlite3.Connection, tenant: str, doc_id: str) -> list[DocumentRecord]:
    """Newest first, each with its chunk count."""
    rows = db.execute(
        f"SELECT {VERSION_SELECT}, (SELECT COUNT(*) FROM chunks c WHERE c.tenant = v.tenant"
        "  AND c.doc_id = v.doc_id AND c.version = v.version)"
        " FROM document_versions v WHERE v.tenant = ? AND v.doc_id = ?"
        " ORDER BY v.version DESC",
        (tenant, doc_id),
    ).fetchall()
    return [version_from_row(row) for row in rows]


def numbers(db: sqlite3.Connection, tenant: str, doc_id: str, through: int) -> list[int]:
    rows = db.execute(
        "SELECT version FROM document_versions WHERE tenant = ? AND doc_id = ? AND version <= ?",
        (tenant, doc_id, through),
    ).fetchall()
    return [row[0] for row in rows]


def forget(db: sqlite3.Connection, tenant: str, doc_id: str, through: int | None) -> None:
    """The version rows numbered through `through`, or all when None."""
    db.execute(
        "DELETE FROM document_versions WHERE tenant = ? AND doc_id = ?"
        " AND (? IS NULL OR version <= ?)",
        (tenant, doc_id, through, through),
    )


def chunk_records(
    db: sqlite3.Connection, tenant: str, doc_id: str, version: int
) -> list[ChunkRecord]:
    rows = db.execute(
        "SELECT chunk_id, doc_id, idx, start, stop, text, content_hash, embedding FROM chunks"
        " WHERE tenant = ? AND doc_id = ? AND version = ? ORDER BY idx",
        (tenant, doc_id, version),
    ).fetchall()
    return [
        ChunkRecord(*row[:-1], embedding=np.frombuffer(row[-1], dtype=np.float32)) for row in rows
    ]
