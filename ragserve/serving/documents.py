"""Documents as a principal may see and change them. Who may do what:

- anyone reads (lists, fetches) only the documents whose ACL admits it;
- a writer adds documents (it owns them) and changes others' only as their ACL grants:
  `write` to re-ingest or delete, `manage` to change the ACL; the owner and admins may do all
  three; a reader changes nothing; a refusal names the permission that is missing;
- a document the caller cannot see is NotFound whatever the operation, so nothing is learned
  about it;
- a client-chosen id lives in the caller's namespace ("<user>~<id>"), so it never collides
  with an id the caller cannot see: a hidden id and a free one get the same answer.
"""

from dataclasses import dataclass

from ragserve.access import Principal, Role, access_for
from ragserve.audit import AuditEntry
from ragserve.rag.documents import (
    AccessFilter,
    Acl,
    ChunkRecord,
    DocumentRecord,
    Permission,
    ScoredChunk,
    WriteConflict,
    namespace_of,
    scoped_doc_id,
)
from ragserve.rag.ingest import IngestResult, SourceDocument, default_doc_id
from ragserve.services import DocumentIndex
from ragserve.serving.errors import Conflict, Forbidden, Invalid, NotFound

ACTIONS = {
    Permission.READ: "read",
    Permission.WRITE: "re-ingest or delete",
    Permission.MANAGE: "change the access of",
}


@dataclass(frozen=True)
class Added:
    """An ingested document; `document` is None when a change made since hid it from the
    caller (it is stored all the same)."""

    result: IngestResult
    document: DocumentRecord | None


def not_found(doc_id: str) -> NotFound:
    return NotFound(f"no document {doc_id!r}", "not_found")


def require(access: AccessFilter, document: DocumentRecord, needed: Permission) -> None:
    """Forbidden, naming the missing permission; only for documents the caller can see."""
    if not access.may(document, needed):
        raise Forbidden(
            f"{access.user!r} may not {ACTIONS[needed]} document {document.doc_id!r}: that "
            f"needs the {needed.label!r} permission, which its ACL does not grant",
            f"missing_{needed.label}_permission",
        )


class DocumentService:
    """Blocking calls (store reads, embedding): an async caller runs them on a worker thread."""

    def __init__(self, index: DocumentIndex) -> None:
        self.index = index

    def visible(self, who: Principal) -> list[DocumentRecord]:
        """Every document the caller may read."""
        return self.index.store.list_documents(access_for(who))

    def page(
        self, who: Principal, after: str | None, limit: int
    ) -> tuple[list[DocumentRecord], bool]:
        """Up to limit of the documents the caller may read, by id, after the id `after`; and
        whether more follow."""
        found = self.index.store.list_documents(access_for(who), after, limit + 1)
        return found[:limit], len(found) > limit

    def get(self, who: Principal, doc_id: str) -> DocumentRecord:
        document = self.index.store.get_document(access_for(who), doc_id)
        if document is None:
            raise not_found(doc_id)
        return document

    def readable_version(self, who: Principal) -> str:
        """Changes exactly when what the caller may read changes (see Store.visible_version):
        the freshness part of a response-cache key."""
        return self.index.store.visible_version(access_for(who))

    def audit_log(self, who: Principal, limit: int, before: float | None) -> list[AuditEntry]:
        """The tenant's document writes, deletes and ACL changes, newest first; for admins."""
        if who.role is not Role.ADMIN:
            raise Forbidden(
                f"the audit trail is for administrators; this key's role is {who.role.value}",
                "forbidden",
            )
        return self.index.store.audit_log(who.tenant, limit, before)

    def chunks(self, who: Principal, doc_id: str) -> list[ScoredChunk]:
        """The document's current chunks in order, with their spans in its text."""
        chunks = self.index.store.document_chunks(access_for(who), doc_id)
        if not chunks:
            self.get(who, doc_id)  # NotFound when hidden or missing
        return chunks

    def add(self, who: Principal, item: SourceDocument, acl: Acl | None) -> Added:
        """Ingest a new document or re-ingest one the caller may write; acl None keeps a stored
        document's ACL (a new one gets the owner alone)."""
        self.require_writer(who)
        access = access_for(who)
        owner = who.user
        if item.doc_id is not None:
            item.doc_id, existing = self._target(who, item.doc_id)
        else:
            item.doc_id = default_doc_id(who.tenant, who.user, item.source)
            existing = self.index.store.get_document(access, item.doc_id)
        if existing is not None:
            require(access, existing, Permission.WRITE)
            if acl is not None:
                require(access, existing, Permission.MANAGE)
            owner = existing.owner
        # The store repeats the permission check in the write's transaction: embedding takes
        # long enough for a delete or an ACL change to land meanwhile.
        try:
            result = self.index.ingestor.ingest(
                item, who.tenant, owner, acl, access, existing is not None
            )
        except WriteConflict as error:
            raise Conflict(f"{error}; nothing was stored", "write_conflict") from error
        if not result.ok:
            raise Invalid(result.error or "cannot ingest", "unparseable_document")
        return Added(result, self.index.store.get_document(access, result.doc_id))

    def versions(self, who: Principal, doc_id: str) -> list[DocumentRecord]:
        """The current version and the earlier ones kept that the caller could read then and
        may read now, newest first."""
        found = self.index.store.document_versions(access_for(who), doc_id)
        if not found:
            raise not_found(doc_id)
        return found

    def version(
        self, who: Principal, doc_id: str, version: int
    ) -> tuple[DocumentRecord, list[ChunkRecord]]:
        """One version the caller may read, with its chunks."""
        listed = {v.version: v for v in self.versions(who, doc_id)}
        chunks = self.index.store.version_chunks(access_for(who), doc_id, version)
        if version not in listed or chunks is None:
            raise NotFound(f"no version {version} of document {doc_id!r}", "version_not_found")
        return listed[version], chunks

    def restore(self, who: Principal, doc_id: str, version: int) -> DocumentRecord:
        """An earlier version written back as the newest (see Store.restore_version)."""
        document = self.get(who, doc_id)
        self.require_writer(who)
        access = access_for(who)
        require(access, document, Permission.MANAGE)
        restored = self.index.store.restore_version(access, doc_id, version)
        if restored is None:
            raise NotFound(
                f"no earlier version {version} of document {doc_id!r}", "version_not_found"
            )
        return restored

    def delete(self, who: Principal, doc_id: str) -> None:
        document = self.get(who, doc_id)
        self.require_writer(who)
        require(access_for(who), document, Permission.WRITE)
        if not self.index.store.delete_document(access_for(who), doc_id):
            raise not_found(doc_id)

    def set_acl(self, who: Principal, doc_id: str, acl: Acl) -> DocumentRecord | None:
        """Replace the ACL; the document as the caller now sees it (None: it removed itself)."""
        document = self.get(who, doc_id)
        self.require_writer(who)
        access = access_for(who)
        require(access, document, Permission.MANAGE)
        if not self.index.store.set_acl(access, doc_id, acl):
            raise not_found(doc_id)
        return self.index.store.get_document(access, doc_id)

    def _target(self, who: Principal, doc_id: str) -> tuple[str, DocumentRecord | None]:
        """The stored id a client-chosen id names, and its document if the caller sees one:
        an id the caller can see, else the id in the caller's namespace. An id in another's
        namespace that the caller cannot see is NotFound, hidden or free alike."""
        access = access_for(who)
        found = self.index.store.get_document(access, doc_id)
        if found is None and namespace_of(doc_id) is None:
            doc_id = scoped_doc_id(who.user, doc_id)
            found = self.index.store.get_document(access, doc_id)
        if found is None and namespace_of(doc_id) != who.user:
            raise not_found(doc_id)
        return doc_id, found

    @staticmethod
    def require_writer(who: Principal) -> None:
        if not who.can_write():
            raise Forbidden(
                f"this key may read documents but not change them (role {who.role})", "forbidden"
            )
