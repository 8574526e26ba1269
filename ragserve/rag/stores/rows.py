"""How documents and chunks map to and from the stores' rows; the domain classes know nothing
of column order."""

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ragserve.rag.documents import Acl, ChunkRecord, DocumentRecord

# The documents table's columns, in the order both stores insert them.
DOCUMENT_COLUMNS = (
    "tenant",
    "doc_id",
    "owner",
    "source",
    "title",
    "content_hash",
    "version",
    "ingested_at",
    "text_length",
    "source_modified_at",
)
# What both stores select for a document, followed by its chunk count.
DOCUMENT_SELECT = ", ".join(f"d.{column}" for column in DOCUMENT_COLUMNS)


# The chunks table's columns, in the order both stores insert them (embedding last).
CHUNK_COLUMNS = (
    "chunk_id",
    "tenant",
    "doc_id",
    "version",
    "idx",
    "start",
    "stop",
    "text",
    "content_hash",
    "tokens",
    "embedding",
)


def chunk_values(document: DocumentRecord, chunk: ChunkRecord, tokens: int) -> tuple[Any, ...]:
    """A chunk's row in CHUNK_COLUMNS order, the embedding as a float32 array; tokens is its
    length in keyword terms (rag.keyword)."""
    return (
        chunk.chunk_id,
        document.tenant,
        document.doc_id,
        document.version,
        chunk.index,
        chunk.start,
        chunk.end,
        chunk.text,
        chunk.content_hash,
        tokens,
        np.asarray(chunk.embedding, dtype=np.float32),
    )


def document_values(document: DocumentRecord) -> tuple[Any, ...]:
    return tuple(getattr(document, column) for column in DOCUMENT_COLUMNS)


def document_from_row(row: Sequence[Any], acl_rows: Iterable[Sequence[Any]]) -> DocumentRecord:
    """From DOCUMENT_SELECT's columns plus the chunk count, and (kind, name, permission) rows."""
    values = dict(zip(DOCUMENT_COLUMNS, row, strict=False))
    return _record(values, Acl.from_entries(acl_rows), row[len(DOCUMENT_COLUMNS)])


def _record(values: dict[str, Any], acl: Acl, num_chunks: int) -> DocumentRecord:
    """A document (or an earlier version) from its columns by name."""
    columns = {c: values[c] for c in DOCUMENT_COLUMNS}
    return DocumentRecord(**columns, acl=acl, num_chunks=num_chunks)


# The versions table's columns, in the order both stores insert them: a replaced version's
# document columns, the ACL it had (JSON of Acl.entries) and when it was replaced.
VERSION_COLUMNS = (
    "tenant",
    "doc_id",
    "version",
    "owner",
    "source",
    "title",
    "content_hash",
    "ingested_at",
    "text_length",
    "source_modified_at",
    "acl",
    "replaced_at",
)
# What both stores select for an earlier version, followed by its chunk count.
VERSION_SELECT = ", ".join(f"v.{column}" for column in VERSION_COLUMNS)


def version_values(document: DocumentRecord, replaced_at: float) -> tuple[Any, ...]:
    values = {"acl": json.dumps(document.acl.entries()), "replaced_at": replaced_at}
    return tuple(values.get(c, getattr(document, c, None)) for c in VERSION_COLUMNS)


def version_from_row(row: Sequence[Any]) -> DocumentRecord:
    """From VERSION_SELECT's columns plus the chunk count."""
    values = dict(zip(VERSION_COLUMNS, row, strict=False))
    acl = Acl.from_entries(json.loads(values["acl"]))
    return _record(values, acl, row[len(VERSION_COLUMNS)])
