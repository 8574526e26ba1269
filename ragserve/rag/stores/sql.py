"""What the two SQL stores share: the transaction skeleton of every write (versioned document
replace, delete, ACL change, restore of an earlier version), permission checks inside those
transactions, and document reads. Each backend supplies the statements through the hooks
below, in its own SQL dialect.

Earlier versions: a write that replaces a document keeps the replaced version (its chunks stay
in the chunks table under their version number, which no search joins, and a row of the
versions table holds its metadata and the ACL it had), up to `versions_kept` of them per
document. A reader sees an earlier version only while it may read the document now and the
version's own ACL admitted it, so a grant made later never opens what was written before it."""

import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager

from ragserve.audit import AuditAction, AuditEntry
from ragserve.rag.documents import (
    DEFAULT_VERSIONS_KEPT,
    AccessFilter,
    Acl,
    ChunkRecord,
    DocumentRecord,
    Permission,
    WriteConflict,
)


class SqlStore(ABC):
    """The write and document-read half of the Store protocol (see ragserve.rag.store)."""

    versions_kept: int = DEFAULT_VERSIONS_KEPT

    # Hooks: one statement (or a few) each, run inside _transaction().

    @abstractmethod
    def _transaction(self, write: bool = False) -> AbstractContextManager[object]:
        """Hold the store's lock and one database transaction; write locks for writing."""

    @abstractmethod
    def _stored_version(self, tenant: str, doc_id: str, for_update: bool) -> int:
        """The document's version, 0 if absent; for_update locks its row until commit."""

    @abstractmethod
    def _insert_chunks(self, document: DocumentRecord, chunks: list[ChunkRecord]) -> None: ...

    @abstractmethod
    def _remove_chunks(self, tenant: str, doc_id: str, version: int | None = None) -> None:
        """Remove the chunks of one version, or of all versions when version is None."""

    @abstractmethod
    def _upsert_document(self, document: DocumentRecord) -> None: ...

    @abstractmethod
    def _remove_document(self, tenant: str, doc_id: str) -> None:
        """Remove the document's row and its ACL rows."""

    @abstractmethod
    def _replace_acl(self, tenant: str, doc_id: str, acl: Acl) -> None: ...

    @abstractmethod
    def _bump_version(self) -> None:
        """Move the index version."""

    @abstractmethod
    def _mark_changed(self, tenant: str, doc_id: str) -> None:
        """Stamp the document with the index version just bumped (see visible_version)."""

    @abstractmethod
    def _visible_summary(self, access: AccessFilter) -> tuple[int, int]:
        """How many documents the filter may read, and the newest stamp among them."""

    @abstractmethod
    def _store_name(self) -> str:
        """What tells this store from another in a version string."""

    @abstractmethod
    def _append_audit(self, entry: AuditEntry) -> None: ...

    @abstractmethod
    def _audit(self, tenant: str | None, before: float | None, limit: int) -> list[AuditEntry]:
        """Newest first, of one tenant or all (None), older than before; limit checked."""

    @abstractmethod
    def _insert_version(self, document: DocumentRecord, replaced_at: float) -> None:
        """Record a replaced version: its metadata and ACL (its chunks stay where they are)."""

    @abstractmethod
    def _versions(self, tenant: str, doc_id: str) -> list[DocumentRecord]:
        """The document's recorded earlier versions, newest first, with the ACL each had and
        its chunk count."""

    @abstractmethod
    def _remove_versions(self, tenant: str, doc_id: str, through: int | None) -> None:
        """Forget the earlier versions numbered through `through` with their chunks, or every
        version record when None (the chunks then go with _remove_chunks)."""

    @abstractmethod
    def _chunk_records(self, tenant: str, doc_id: str, version: int) -> list[ChunkRecord]:
        """One version's chunks in order, with their embeddings."""

    @abstractmethod
    def _documents(
        self,
        access: AccessFilter,
        doc_ids: list[str] | None,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[DocumentRecord]:
        """The documents the filter admits, with ACLs, by doc_id: those named (doc_ids), or
        those after `after` (all when None), at most limit (all when None)."""

    # The protocol's methods, the same for every backend.

    def current_version(self, tenant: str, doc_id: str) -> int:
        with self._transaction():
            return self._stored_version(tenant, doc_id, for_update=False)

    def write_document(
        self,
        document: DocumentRecord,
        chunks: list[ChunkRecord],
        writer: AccessFilter | None = None,
        replaces: bool = False,
    ) -> None:
        with self._transaction(write=True):
            old_version = self._stored_version(document.tenant, document.doc_id, for_update=True)
            if writer is not None:
                self._check_writer(writer, document, old_version, replaces)
            self._write(document, chunks, old_version, writer.user if writer else document.owner)

    def restore_version(
        self, access: AccessFilter, doc_id: str, version: int
    ) -> DocumentRecord | None:
        with self._transaction(write=True):
            # Locked before it is read, so a write landing meanwhile waits for this one.
            self._stored_version(access.tenant, doc_id, for_update=True)
            current = self._permitted(access, doc_id, Permission.MANAGE)
            if current is None:
                return None
            earlier = next(
                (v for v in self._readable_versions(access, current) if v.version == version), None
            )
            if earlier is None:
                return None
            restored = DocumentRecord(
                doc_id=doc_id,
                tenant=access.tenant,
                owner=current.owner,
                source=earlier.source,
                title=earlier.title,
                content_hash=earlier.content_hash,
                acl=current.acl.common(earlier.acl),
                text_length=earlier.text_length,
                source_modified_at=earlier.source_modified_at,
            )
            chunks = self._chunk_records(access.tenant, doc_id, version)
            self._write(restored, chunks, current.version, access.user, restored_from=version)
            return restored

    def document_versions(self, access: AccessFilter, doc_id: str) -> list[DocumentRecord]:
        with self._transaction():
            return self._all_readable_versions(access, doc_id)

    def version_chunks(
        self, access: AccessFilter, doc_id: str, version: int
    ) -> list[ChunkRecord] | None:
        with self._transaction():
            readable = self._all_readable_versions(access, doc_id)
            if not any(v.version == version for v in readable):
                return None
            return self._chunk_records(access.tenant, doc_id, version)

    def _all_readable_versions(self, access: AccessFilter, doc_id: str) -> list[DocumentRecord]:
        found = self._documents(access, [doc_id])
        return [found[0], *self._readable_versions(access, found[0])] if found else []

    def _readable_versions(
        self, access: AccessFilter, current: DocumentRecord
    ) -> list[DocumentRecord]:
        """The earlier versions of a document the filter may read now, newest first."""
        return [
            v
            for v in self._versions(current.tenant, current.doc_id)
            if access.may(v, Permission.READ)
        ]

    def _write(
        self,
        document: DocumentRecord,
        chunks: list[ChunkRecord],
        old_version: int,
        actor: str,
        **detail: object,
    ) -> None:
        """A new version of the document, the replaced one kept as an earlier version."""
        if old_version:
            replaced = self._documents(_everything(document.tenant), [document.doc_id])[0]
        document.next_version(old_version, chunks)
        self._insert_chunks(document, chunks)
        if old_version and self.versions_kept:
            self._insert_version(replaced, document.ingested_at)
            self._remove_versions(
                document.tenant, document.doc_id, old_version - self.versions_kept
            )
        elif old_version:
            self._remove_chunks(document.tenant, document.doc_id, old_version)
        self._upsert_document(document)
        if not document.keep_acl:
            self._replace_acl(document.tenant, document.doc_id, document.acl)
        self._bump_version()
        self._mark_changed(document.tenant, document.doc_id)
        self._append_audit(
            AuditEntry.of(
                document.tenant,
                actor,
                AuditAction.DOCUMENT_WRITE,
                document.doc_id,
                document.ingested_at,
                document.version,
                source=document.source,
                owner=document.owner,
                chunks=len(chunks),
                content_hash=document.content_hash,
                acl=None if document.keep_acl else document.acl.as_json(),
                **detail,
            )
        )

    def delete_document(self, access: AccessFilter, doc_id: str) -> bool:
        with self._transaction(write=True):
            document = self._permitted(access, doc_id, Permission.WRITE)
            if document is None:
                return False
            self._remove_chunks(access.tenant, doc_id)
            self._remove_versions(access.tenant, doc_id, None)
            self._remove_document(access.tenant, doc_id)
            self._bump_version()
            self._append_audit(
                AuditEntry.of(
                    access.tenant,
                    access.user,
                    AuditAction.DOCUMENT_DELETE,
                    doc_id,
                    time.time(),
                    document.version,
                    source=document.source,
                )
            )
        return True

    def set_acl(self, access: AccessFilter, doc_id: str, acl: Acl) -> bool:
        return bool(self.set_acls(access, [(doc_id, acl)]))

    def set_acls(self, access: AccessFilter, changes: list[tuple[str, Acl]]) -> list[str]:
        with self._transaction(write=True):
            found = {d.doc_id: d for d in self._documents(access, [i for i, _ in changes])}
            changed = []
            for doc_id, acl in changes:
                document = found.get(doc_id)
                if not access.may(document, Permission.MANAGE):
                    continue
                if not changed:
                    self._bump_version()  # one new stamp for every document the batch changes
                self._replace_acl(access.tenant, doc_id, acl)
                self._mark_changed(access.tenant, doc_id)
                self._append_audit(
                    AuditEntry.of(
                        access.tenant,
                        access.user,
                        AuditAction.ACL_CHANGE,
                        doc_id,
                        time.time(),
                        document.version,
                        acl=acl.as_json(),
                        previous=document.acl.as_json(),
                    )
                )
                changed.append(doc_id)
        return changed

    def visible_version(self, access: AccessFilter) -> str:
        """Every write and ACL change stamps its document with a new, highest index version.
        A document that becomes readable therefore brings a stamp above every readable one,
        and one that stops being readable lowers the count; between two moments with the same
        count and newest stamp no readable document came or went, so the readable set (and
        each one's version) is the same."""
        with self._transaction():
            count, newest = self._visible_summary(access)
        return f"{self._store_name()}:{count}:{newest}"

    def audit_log(
        self, tenant: str | None, limit: int = 100, before: float | None = None
    ) -> list[AuditEntry]:
        with self._transaction():
            return self._audit(tenant, before, limit)

    def get_document(self, access: AccessFilter, doc_id: str) -> DocumentRecord | None:
        with self._transaction():
            found = self._documents(access, [doc_id])
        return found[0] if found else None

    def list_documents(
        self, access: AccessFilter, after: str | None = None, limit: int | None = None
    ) -> list[DocumentRecord]:
        with self._transaction():
            return self._documents(access, None, after, limit)

    def _check_writer(
        self, writer: AccessFilter, document: DocumentRecord, old_version: int, replaces: bool
    ) -> None:
        """Repeat the writer's permission check inside the write's transaction, where it cannot
        go stale: embedding a document takes long enough for a delete or an ACL change to land
        between the caller's check and the write."""
        if not old_version:
            if replaces:
                raise WriteConflict(f"document {document.doc_id!r} was deleted meanwhile")
            return
        needed = Permission.WRITE if document.keep_acl else Permission.MANAGE
        stored = self._permitted(writer, document.doc_id, needed)
        if stored is None:
            raise WriteConflict(
                f"{writer.user!r} lost the {needed.label!r} permission on document "
                f"{document.doc_id!r} meanwhile"
            )
        document.owner = stored.owner  # created meanwhile by another writer: now a re-ingest

    def _permitted(
        self, access: AccessFilter, doc_id: str, needed: Permission
    ) -> DocumentRecord | None:
        """The document if the filter holds at least `needed` on it."""
        found = self._documents(access, [doc_id])
        return found[0] if found and access.may(found[0], needed) else None


def _everything(tenant: str) -> AccessFilter:
    return AccessFilter(tenant, "store", everything=True)
