import uuid

import numpy as np
import pytest

from ragserve.rag.documents import (
    DEFAULT_VERSIONS_KEPT,
    Acl,
    ChunkRecord,
    DocumentRecord,
    content_hash,
)
from tests.conftest import new_postgres_database

DIMENSION = 8


@pytest.fixture(params=["sqlite", "postgres"])
def store_factory(request, tmp_path):
    """Opens fresh stores of one backend; the same contract runs against both."""
    opened = []

    def open_store(dimension: int = DIMENSION, versions_kept: int = DEFAULT_VERSIONS_KEPT):
        if request.param == "sqlite":
            from ragserve.rag.stores.sqlite import SqliteStore

            path = tmp_path / f"{uuid.uuid4().hex}.sqlite"
            store = SqliteStore(path, dimension, versions_kept)
        else:
            from ragserve.rag.stores.postgres import PostgresStore

            server = request.getfixturevalue("postgres_server")
            store = PostgresStore(new_postgres_database(server), dimension, versions_kept)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


def unit(vector) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float32)
    return v / np.linalg.norm(v)


def make_document(
    doc_id: str,
    texts: list[str],
    vectors: list[np.ndarray],
    owner: str = "owner",
    tenant: str = "acme",
    acl: Acl | None = None,
) -> tuple[DocumentRecord, list[ChunkRecord]]:
    document = DocumentRecord(
        doc_id=doc_id,
        tenant=tenant,
        owner=owner,
        source=f"{doc_id}.txt",
        title=f"Title of {doc_id}",
        content_hash=content_hash("".join(texts)),
        acl=acl or Acl(),
    )
    chunks, offset = [], 0
    for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
        chunks.append(
            ChunkRecord(
                "", doc_id, i, offset, offset + len(text), text, content_hash(text), unit(vector)
            )
        )
        offset += len(text) + 1
    return document, chunks
