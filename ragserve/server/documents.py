"""Document and search routes. Who may do what:

- anyone with a key reads (lists, fetches, searches) only the documents whose ACL admits it;
- a writer key adds documents (it owns them) and changes others' only as their ACL grants:
  `write` to re-ingest or delete, `manage` to change the ACL; the owner and admin keys may do
  all three; a reader key changes nothing; a refusal names the permission that is missing;
- a document the caller cannot see is 404 whatever the operation, so nothing is learned about it;
- a client-chosen id lives in the caller's namespace ("<user>~<id>"), so it never collides
  with an id the caller cannot see: a hidden id and a free one get the same answer.
"""

import json
import uuid
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from ragserve.access import Principal, access_for
from ragserve.rag.documents import (
    AccessFilter,
    Acl,
    DocumentRecord,
    Permission,
    ScoredChunk,
    WriteConflict,
    namespace_of,
    scoped_doc_id,
)
from ragserve.rag.ingest import SourceDocument, default_doc_id
from ragserve.rag.parsers import parse_text
from ragserve.server.bodies import check_json_body
from ragserve.server.dependencies import principal
from ragserve.server.errors import APIError, Rejection, invalid
from ragserve.server.protocol import error_responses
from ragserve.server.responses import (
    AclChanged,
    Deleted,
    Document,
    DocumentList,
    SearchResults,
    StoredOutOfSight,
    json_body,
)
from ragserve.server.state import ServerState

# An id, optionally in a namespace: "<user>~<id>" (see scoped_doc_id).
DOC_ID_PATTERN = r"^([A-Za-z0-9._@-]{1,64}~)?[A-Za-z0-9._:-]{1,128}$"


PermissionLabel = Literal["read", "write", "manage"]
Grants = list[str] | dict[str, PermissionLabel]


class AclBody(BaseModel):
    """Names (read) or {name: read | write | manage}, for users and for groups."""

    model_config = ConfigDict(extra="forbid")

    users: Grants = Field(default_factory=list)
    groups: Grants = Field(default_factory=list)

    def to_acl(self) -> Acl:
        return Acl.of(self.users, self.groups)


class DocumentText(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1)
    title: str | None = None
    source: str | None = None
    doc_id: str | None = Field(None, pattern=DOC_ID_PATTERN)
    # None keeps the ACL of a document being re-ingested; a new one gets the owner alone.
    acl: AclBody | None = None


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=4000)
    top_k: int | None = Field(None, ge=1, le=100)


def document_json(document: DocumentRecord, access: AccessFilter) -> dict[str, Any]:
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
    }


def _not_found(doc_id: str) -> APIError:
    return APIError(404, f"no document {doc_id!r}", "invalid_request_error", "not_found")


def _forbidden() -> APIError:
    return APIError(
        403,
        "this key may read documents but not change them (role reader)",
        "permission_error",
        "forbidden",
    )


def _require(access: AccessFilter, document: DocumentRecord, needed: Permission) -> None:
    """403 naming the missing permission; only for documents the caller can see."""
    if not access.may(document, needed):
        raise APIError(
            403,
            f"{access.user!r} may not {ACTIONS[needed]} document {document.doc_id!r}: that "
            f"needs the {needed.label!r} permission, which its ACL does not grant",
            "permission_error",
            f"missing_{needed.label}_permission",
        )


ACTIONS = {
    Permission.READ: "read",
    Permission.WRITE: "re-ingest or delete",
    Permission.MANAGE: "change the access of",
}


# The body POST /v1/documents reads itself: JSON text, or a multipart file upload.
UPLOAD_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": DocumentText.model_json_schema()},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "acl": {"type": "string", "description": "JSON of {users, groups}"},
                    "doc_id": {"type": "string"},
                },
            }
        },
    },
}


def document_routes(state: ServerState) -> APIRouter:
    router = APIRouter(responses=error_responses(400, 401, 403, 404, 413, 429))
    settings = state.settings

    def too_large(what: str = "file") -> APIError:
        return APIError(
            413,
            f"{what} larger than {settings.max_upload_bytes} bytes (max_upload_bytes)",
            "invalid_request_error",
            "file_too_large",
            rejection=Rejection.INVALID,
        )

    async def source_from_multipart(request: Request) -> tuple[SourceDocument, Acl | None]:
        # RequestGate refused a body declared over BodyCaps.upload before reading it, and
        # counts one without a length as it streams in here; the file is held to the limit.
        form = await request.form(max_part_size=settings.max_upload_bytes)
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise invalid("multipart upload needs a 'file' part", "invalid_request")
        data = await upload.read(settings.max_upload_bytes + 1)
        if len(data) > settings.max_upload_bytes:
            raise too_large()
        try:
            acl_field = form.get("acl")
            acl = None
            if acl_field is not None:
                # A form field skips the JSON body guard: the same checks, here.
                check_json_body(str(acl_field).encode())
                acl = AclBody.model_validate(json.loads(str(acl_field))).to_acl()
            doc_id = form.get("doc_id")
            if doc_id is not None:
                DocumentText(text="-", doc_id=str(doc_id))  # validates the pattern
        except (ValueError, ValidationError) as error:
            raise invalid(f"bad 'acl' or 'doc_id' field: {error}", "invalid_request") from error
        name = upload.filename or "upload"
        return SourceDocument(name, data=data, doc_id=str(doc_id) if doc_id else None), acl

    def source_from_json(data: bytes) -> tuple[SourceDocument, Acl | None]:
        """On a worker thread: decoding, validating and parsing up to max_upload_bytes of text
        would hold the event loop for as long."""
        try:
            body = DocumentText.model_validate(json.loads(data))
        except (ValueError, ValidationError) as error:
            raise invalid(f"bad document body: {error}", "invalid_request") from error
        # The limit a file has, in the same unit: the text's bytes as UTF-8.
        size = len(body.text.encode())
        if size > settings.max_upload_bytes:
            raise too_large(f"document text of {size} bytes (UTF-8)")
        source = body.source or f"text:{uuid.uuid4().hex[:12]}"
        parsed = parse_text(body.text, source)
        parsed.title = body.title or parsed.title
        acl = body.acl.to_acl() if body.acl is not None else None
        return SourceDocument(source, parsed=parsed, doc_id=body.doc_id), acl

    async def target_of(who: Principal, doc_id: str) -> tuple[str, DocumentRecord | None]:
        """The stored id a client-chosen id names, and its document if the caller sees one:
        an id the caller can see, else the id in the caller's namespace. An id in another's
        namespace that the caller cannot see is 404, hidden or free alike."""
        access = access_for(who)
        found = await run_in_threadpool(state.rag.store.get_document, access, doc_id)
        if found is None and namespace_of(doc_id) is None:
            doc_id = scoped_doc_id(who.user, doc_id)
            found = await run_in_threadpool(state.rag.store.get_document, access, doc_id)
        if found is None and namespace_of(doc_id) != who.user:
            raise _not_found(doc_id)
        return doc_id, found

    @router.post(
        "/v1/documents",
        response_model=None,
        status_code=201,
        responses={201: {"model": Document | StoredOutOfSight}} | error_responses(409),
        openapi_extra={"requestBody": UPLOAD_BODY},
    )
    async def add_document(request: Request, who: Principal = Depends(principal)) -> dict:
        if not who.can_write():
            raise _forbidden()
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            item, acl = await source_from_multipart(request)
        else:
            item, acl = await run_in_threadpool(source_from_json, await request.body())
        access = access_for(who)
        owner = who.user
        if item.doc_id is not None:
            item.doc_id, existing = await target_of(who, item.doc_id)
        else:
            item.doc_id = default_doc_id(who.tenant, who.user, item.source)
            existing = await run_in_threadpool(state.rag.store.get_document, access, item.doc_id)
        if existing is not None:
            _require(access, existing, Permission.WRITE)
            if acl is not None:
                _require(access, existing, Permission.MANAGE)
            owner = existing.owner
        # The store repeats the permission check in the write's transaction: embedding takes
        # long enough for a delete or an ACL change to land meanwhile.
        replaces = existing is not None
        try:
            result = await run_in_threadpool(
                state.rag.ingestor.ingest, item, who.tenant, owner, acl, access, replaces
            )
        except WriteConflict as error:
            raise APIError(
                409, f"{error}; nothing was stored", "invalid_request_error", "write_conflict"
            ) from error
        if not result.ok:
            raise invalid(result.error or "cannot ingest", "unparseable_document")
        counts = {"embedded_chunks": result.embedded, "reused_chunks": result.reused}
        document = await run_in_threadpool(state.rag.store.get_document, access, result.doc_id)
        if document is None:  # stored, then hidden from the caller by a change made since
            hidden = {"id": result.doc_id, "object": "document", "version": result.version}
            return hidden | {"permission": None} | counts
        return document_json(document, access) | counts

    @router.get("/v1/documents", response_model=None, responses=json_body(DocumentList))
    async def list_documents(who: Principal = Depends(principal)) -> dict:
        access = access_for(who)
        documents = await run_in_threadpool(state.rag.store.list_documents, access)
        return {"object": "list", "data": [document_json(d, access) for d in documents]}

    async def visible_document(who: Principal, doc_id: str) -> DocumentRecord:
        document = await run_in_threadpool(state.rag.store.get_document, access_for(who), doc_id)
        if document is None:
            raise _not_found(doc_id)
        return document

    @router.get("/v1/documents/{doc_id}", response_model=None, responses=json_body(Document))
    async def get_document(doc_id: str, who: Principal = Depends(principal)) -> dict:
        return document_json(await visible_document(who, doc_id), access_for(who))

    @router.get(
        "/v1/documents/{doc_id}/chunks", response_model=None, responses=json_body(SearchResults)
    )
    async def document_chunks(doc_id: str, who: Principal = Depends(principal)) -> dict:
        """The document's current chunks in order, with their spans in its text."""
        access = access_for(who)
        chunks = await run_in_threadpool(state.rag.store.document_chunks, access, doc_id)
        if not chunks:
            await visible_document(who, doc_id)  # 404 when hidden or missing
        return {"object": "list", "data": [chunk_json(c) for c in chunks]}

    @router.delete("/v1/documents/{doc_id}", response_model=None, responses=json_body(Deleted))
    async def delete_document(doc_id: str, who: Principal = Depends(principal)) -> dict:
        document = await visible_document(who, doc_id)
        if not who.can_write():
            raise _forbidden()
        _require(access_for(who), document, Permission.WRITE)
        if not await run_in_threadpool(state.rag.store.delete_document, access_for(who), doc_id):
            raise _not_found(doc_id)
        return {"id": doc_id, "object": "document", "deleted": True}

    @router.put(
        "/v1/documents/{doc_id}/acl",
        response_model=None,
        responses=json_body(Document | AclChanged),
    )
    async def set_acl(doc_id: str, body: AclBody, who: Principal = Depends(principal)) -> dict:
        document = await visible_document(who, doc_id)
        if not who.can_write():
            raise _forbidden()
        access = access_for(who)
        _require(access, document, Permission.MANAGE)
        acl = body.to_acl()
        if not await run_in_threadpool(state.rag.store.set_acl, access, doc_id, acl):
            raise _not_found(doc_id)
        document = await run_in_threadpool(state.rag.store.get_document, access, doc_id)
        if document is None:  # the caller removed itself from the ACL
            return {"id": doc_id, "object": "document", "acl": acl.as_json(), "permission": None}
        return document_json(document, access)

    @router.post("/v1/search", response_model=None, responses=json_body(SearchResults))
    async def search(body: SearchRequest, who: Principal = Depends(principal)) -> dict:
        chunks = await run_in_threadpool(
            state.rag.retriever.hybrid, access_for(who), body.query, body.top_k
        )
        return {"object": "list", "data": [chunk_json(c) for c in chunks]}

    return router
