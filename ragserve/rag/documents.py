"""What the store holds: documents with their ACL, and chunks with spans and embeddings."""

import hashlib
import json
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Acl:
    """Who may read a document besides its owner. Empty means the owner alone (fail closed)."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    @classmethod
    def of(cls, users: list[str] | None = None, groups: list[str] | None = None) -> "Acl":
        return cls(tuple(sorted(set(users or []))), tuple(sorted(set(groups or []))))


@dataclass(frozen=True)
class AccessFilter:
    """The reader a store query is run for; every read takes one, so none can skip the ACL.

    Visible: documents of the tenant that the user owns, or whose ACL names the user or one of
    the groups. `everything` (tenant administrators and the local operator) sees the whole
    tenant."""

    tenant: str
    user: str
    groups: tuple[str, ...] = ()
    everything: bool = False


@dataclass
class DocumentRecord:
    doc_id: str
    tenant: str
    owner: str
    source: str
    title: str
    content_hash: str
    acl: Acl
    version: int = 0
    ingested_at: float = 0.0
    num_chunks: int = 0
    text_length: int = 0

    def next_version(self, old_version: int, chunks: list["ChunkRecord"]) -> None:
        """Number this write as the version after old_version and name its chunks; both stores
        call it inside the write transaction."""
        self.version = old_version + 1
        self.ingested_at = time.time()
        self.num_chunks = len(chunks)
        for chunk in chunks:
            chunk.chunk_id = chunk_id(self.tenant, self.doc_id, self.version, chunk.index)

    def readers_digest(self) -> str:
        """Names who may read this document (tenant, owner, ACL): two documents with the same
        digest have the same readers. It salts the prefix cache for prompts that carry the
        document's text, so it changes whenever the ACL does."""
        readers = [self.tenant, self.owner, list(self.acl.users), list(self.acl.groups)]
        return hashlib.sha256(json.dumps(readers).encode()).hexdigest()[:32]

    def columns(self) -> tuple[Any, ...]:
        """The stored columns, in the stores' INSERT order."""
        return (
            self.tenant,
            self.doc_id,
            self.owner,
            self.source,
            self.title,
            self.content_hash,
            self.version,
            self.ingested_at,
            self.text_length,
        )

    @classmethod
    def from_row(cls, row: Sequence[Any], acl_pairs: list[tuple[str, str]]) -> "DocumentRecord":
        """From (doc_id, tenant, owner, source, title, content_hash, version, ingested_at,
        text_length, num_chunks) and (kind, name) ACL pairs, as both stores select them."""
        acl = Acl.of(
            [name for kind, name in acl_pairs if kind == "user"],
            [name for kind, name in acl_pairs if kind == "group"],
        )
        doc_id, tenant, owner, source, title, digest, version, ingested_at, length, chunks = row
        return cls(
            doc_id, tenant, owner, source, title, digest, acl, version, ingested_at, chunks, length
        )


def query_terms(text: str, limit: int = 64) -> list[str]:
    """A query's distinct words, lower-cased: all a full-text query is built from, so no user
    text reaches a query parser as syntax."""
    return list(dict.fromkeys(re.findall(r"\w+", text.lower())))[:limit]


@dataclass
class ChunkRecord:
    chunk_id: str
    doc_id: str
    index: int
    start: int
    end: int
    text: str
    content_hash: str
    embedding: np.ndarray = field(repr=False)


@dataclass
class ScoredChunk:
    chunk_id: str
    doc_id: str
    title: str
    source: str
    index: int
    start: int
    end: int
    text: str
    score: float
    # The document's readers_digest, attached by retrieval for prompts that carry the text.
    readers: str = ""


def evidence_salt(chunk: ScoredChunk) -> str:
    """The prefix-cache salt for a prompt carrying the chunk's text: its readers, or, when they
    are unknown, a salt nobody else gets (fail closed)."""
    return chunk.readers or "unshared:" + secrets.token_hex(16)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def chunk_id(tenant: str, doc_id: str, version: int, index: int) -> str:
    return hashlib.sha256(f"{tenant}\0{doc_id}\0{version}\0{index}".encode()).hexdigest()[:20]
