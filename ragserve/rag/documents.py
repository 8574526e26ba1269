"""What the store holds: documents with their ACL, and chunks with spans and embeddings."""

import hashlib
import json
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np


class Permission(IntEnum):
    """What an ACL entry grants; each level includes the ones below it."""

    READ = 1
    WRITE = 2  # re-ingest and delete
    MANAGE = 3  # change the ACL

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, label: "str | Permission") -> "Permission":
        if isinstance(label, Permission):
            return label
        try:
            return cls[label.upper()]
        except KeyError:
            raise ValueError(f"unknown permission {label!r}: read, write or manage") from None


# Earlier versions a store keeps of each document by default (the document_versions_kept
# setting).
DEFAULT_VERSIONS_KEPT = 10

Grants = Iterable[str] | Mapping[str, "str | Permission"] | None


@dataclass(frozen=True)
class Acl:
    """Who may do what with a document besides its owner, who may do everything. Entries name
    users and groups, each with one Permission. Empty means the owner alone (fail closed)."""

    users: tuple[tuple[str, Permission], ...] = ()
    groups: tuple[tuple[str, Permission], ...] = ()

    @classmethod
    def of(cls, users: Grants = None, groups: Grants = None) -> "Acl":
        """From names (read) or {name: permission}."""

        def entries(grants: Grants) -> tuple[tuple[str, Permission], ...]:
            if isinstance(grants, Mapping):
                levels = {name: Permission.parse(p) for name, p in grants.items()}
            else:
                levels = dict.fromkeys(grants or (), Permission.READ)
            return tuple(sorted(levels.items()))

        return cls(entries(users), entries(groups))

    @classmethod
    def from_entries(cls, rows: Iterable[Sequence[Any]]) -> "Acl":
        """From (kind, name, permission) rows, as the stores keep them."""
        rows = list(rows)
        return cls.of(
            {name: level for kind, name, level in rows if kind == "user"},
            {name: level for kind, name, level in rows if kind == "group"},
        )

    def entries(self) -> list[tuple[str, str, str]]:
        """(kind, name, permission) rows, as the stores keep them."""
        return [("user", name, p.label) for name, p in self.users] + [
            ("group", name, p.label) for name, p in self.groups
        ]

    def reader_names(self) -> tuple[list[str], list[str]]:
        """Users and groups that may read: every entry, whatever its level."""
        return [name for name, _ in self.users], [name for name, _ in self.groups]

    def permission_of(self, user: str, groups: Iterable[str]) -> Permission | None:
        member = set(groups)
        levels = [p for name, p in self.users if name == user]
        levels += [p for name, p in self.groups if name in member]
        return max(levels, default=None)

    def as_json(self) -> dict[str, dict[str, str]]:
        return {
            "users": {name: p.label for name, p in self.users},
            "groups": {name: p.label for name, p in self.groups},
        }

    def common(self, other: "Acl") -> "Acl":
        """The grants both ACLs make, each at the lower of its two levels."""

        def both(
            mine: tuple[tuple[str, Permission], ...], theirs: tuple[tuple[str, Permission], ...]
        ) -> dict[str, Permission]:
            levels = dict(theirs)
            return {name: min(p, levels[name]) for name, p in mine if name in levels}

        return Acl.of(both(self.users, other.users), both(self.groups, other.groups))


@dataclass(frozen=True)
class AccessFilter:
    """The reader a store query is run for; every read takes one, so none can skip the ACL.

    Visible: documents of the tenant that the user owns, or whose ACL names the user or one of
    the groups (at any level). `everything` (tenant administrators and the local operator) sees
    the whole tenant."""

    tenant: str
    user: str
    groups: tuple[str, ...] = ()
    everything: bool = False

    def permission_on(self, document: "DocumentRecord") -> Permission | None:
        """What this reader may do with a document: everything as its owner or a tenant
        administrator, else the highest level its user or groups are granted."""
        if document.tenant != self.tenant:
            return None
        if self.everything or document.owner == self.user:
            return Permission.MANAGE
        return document.acl.permission_of(self.user, self.groups)

    def may(self, document: "DocumentRecord | None", needed: Permission) -> bool:
        """Whether this reader holds at least `needed` on the document (None: not visible)."""
        level = self.permission_on(document) if document is not None else None
        return level is not None and level >= needed


class WriteConflict(Exception):
    """A write whose document was deleted, or whose writer lost the permission, between the
    writer's check and the write's transaction; nothing was written."""


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
    # When the source last changed it (a synced file's modified time, a page's Last-Modified);
    # None when unknown (an upload).
    source_modified_at: float | None = None
    # On a write: leave the stored ACL as it is instead of writing `acl` (a re-ingest by
    # someone who may write the document but not manage its access).
    keep_acl: bool = False

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
        readers = [self.tenant, self.owner, *self.acl.reader_names()]
        return hashlib.sha256(json.dumps(readers).encode()).hexdigest()[:32]


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
    # The document version the chunk belongs to (answers cite it).
    version: int = 0
    # The heading its first line stands under in the document, when the chunk starts below
    # one (retrieval fills it in for evidence; "" if none).
    heading: str = ""


def document_text(chunks: list[ScoredChunk], start: int = 0) -> str:
    """A document's text from its chunks (of one version; they overlap), from start to the end
    of the last. What no chunk covers is whitespace between paragraphs (chunks end at one), so
    it reads as a line break."""
    text = ["\n"] * max((c.start + len(c.text) - start for c in chunks), default=0)
    for chunk in chunks:
        skip = max(0, start - chunk.start)
        at = chunk.start + skip - start
        text[at : at + len(chunk.text) - skip] = chunk.text[skip:]
    return "".join(text)


# Client-chosen document ids live in their owner's namespace: "<owner>~<id>".
NAMESPACE_SEPARATOR = "~"


def scoped_doc_id(owner: str, doc_id: str) -> str:
    """A client-chosen id as stored: in the owner's namespace unless it names one already."""
    if NAMESPACE_SEPARATOR in doc_id:
        return doc_id
    return f"{owner}{NAMESPACE_SEPARATOR}{doc_id}"


def namespace_of(doc_id: str) -> str | None:
    owner, separator, _ = doc_id.partition(NAMESPACE_SEPARATOR)
    return owner if separator else None


def evidence_salt(chunk: ScoredChunk) -> str:
    """The prefix-cache salt for a prompt carrying the chunk's text: its readers, or, when they
    are unknown, a salt nobody else gets (fail closed)."""
    return chunk.readers or "unshared:" + secrets.token_hex(16)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def chunk_id(tenant: str, doc_id: str, version: int, index: int) -> str:
    return hashlib.sha256(f"{tenant}\0{doc_id}\0{version}\0{index}".encode()).hexdigest()[:20]


def document_json(document: "DocumentRecord", access: AccessFilter) -> dict[str, Any]:
    """A document as its caller sees it, with who may do what and the caller's own level."""
    permission = access.permission_on(document)
    return {
        "id": document.doc_id,
        "object": "document",
        "title": document.title,
        "source": document.source,
        "owner": document.owner,
        "version": document.version,
        "acl": document.acl.as_json(),
        "permission": permission.label if permission else None,
        "num_chunks": document.num_chunks,
        "text_length": document.text_length,
        "content_hash": document.content_hash,
        "ingested_at": document.ingested_at,
        "source_modified_at": document.source_modified_at,
    }


def version_json(
    version: "DocumentRecord", current: "DocumentRecord", access: AccessFilter
) -> dict[str, Any]:
    """One version of a document as its caller sees it: the ACL it had only for those who may
    manage the document now."""
    manages = access.may(current, Permission.MANAGE)
    return {
        "version": version.version,
        "current": version.version == current.version,
        "title": version.title,
        "source": version.source,
        "content_hash": version.content_hash,
        "num_chunks": version.num_chunks,
        "text_length": version.text_length,
        "ingested_at": version.ingested_at,
        "acl": version.acl.as_json() if manages else None,
    }


def chunk_json(chunk: ScoredChunk) -> dict[str, Any]:
    return {
        "chunk_id": chunk.chunk_id,
        "doc_id": chunk.doc_id,
        "title": chunk.title,
        "source": chunk.source,
        "start": chunk.start,
        "end": chunk.end,
        "text": chunk.text,
        "score": chunk.score,
        "version": chunk.version,
    }
