"""Document and search routes: HTTP only. Bodies (JSON text or a multipart upload) become a
SourceDocument and an ACL here; who may do what is DocumentService's (ragserve.serving),
and its refusals become HTTP statuses in server.errors.
"""

import json
import uuid
from typing import Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from ragserve.access import Principal, access_for
from ragserve.rag.documents import Acl, chunk_json, document_json
from ragserve.rag.ingest import SourceDocument
from ragserve.rag.parsers import parse_text
from ragserve.server.bodies import check_json_body
from ragserve.server.dependencies import principal, server_state
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
from ragserve.serving.documents import DocumentService

# An id, optionally in a namespace: "<user>~<id>" (see scoped_doc_id).
# Documents per page of GET /v1/documents: by default, and at most.
DEFAULT_PAGE = 100
MAX_PAGE = 1000
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


def too_large(max_bytes: int, what: str = "file") -> APIError:
    return APIError(
        413,
        f"{what} larger than {max_bytes} bytes (max_upload_bytes)",
        "invalid_request_error",
        "file_too_large",
        rejection=Rejection.INVALID,
    )


async def source_from_multipart(
    request: Request, max_bytes: int
) -> tuple[SourceDocument, Acl | None]:
    # RequestGate refused a body declared over BodyCaps.upload before reading it, and counts
    # one without a length as it streams in here; the file is held to the limit.
    form = await request.form(max_part_size=max_bytes)
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise invalid("multipart upload needs a 'file' part", "invalid_request")
    data = await upload.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise too_large(max_bytes)
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


def source_from_json(data: bytes, max_bytes: int) -> tuple[SourceDocument, Acl | None]:
    """On a worker thread: decoding, validating and parsing up to max_upload_bytes of text
    would hold the event loop for as long."""
    try:
        body = DocumentText.model_validate(json.loads(data))
    except (ValueError, ValidationError) as error:
        raise invalid(f"bad document body: {error}", "invalid_request") from error
    # The limit a file has, in the same unit: the text's bytes as UTF-8.
    size = len(body.text.encode())
    if size > max_bytes:
        raise too_large(max_bytes, f"document text of {size} bytes (UTF-8)")
    source = body.source or f"text:{uuid.uuid4().hex[:12]}"
    parsed = parse_text(body.text, source)
    parsed.title = body.title or parsed.title
    acl = body.acl.to_acl() if body.acl is not None else None
    return SourceDocument(source, parsed=parsed, doc_id=body.doc_id), acl


router = APIRouter(responses=error_responses(400, 401, 403, 404, 413, 429))


@router.post(
    "/v1/documents",
    response_model=None,
    status_code=201,
    responses={201: {"model": Document | StoredOutOfSight}} | error_responses(409),
    openapi_extra={"requestBody": UPLOAD_BODY},
)
async def add_document(
    request: Request,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> dict:
    DocumentService.require_writer(who)  # before reading the body
    max_bytes = state.settings.max_upload_bytes
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        item, acl = await source_from_multipart(request, max_bytes)
    else:
        item, acl = await run_in_threadpool(source_from_json, await request.body(), max_bytes)
    added = await run_in_threadpool(state.documents.add, who, item, acl)
    result = added.result
    counts = {"embedded_chunks": result.embedded, "reused_chunks": result.reused}
    if added.document is None:
        hidden = {"id": result.doc_id, "object": "document", "version": result.version}
        return hidden | {"permission": None} | counts
    return document_json(added.document, access_for(who)) | counts


@router.get("/v1/documents", response_model=None, responses=json_body(DocumentList))
async def list_documents(
    limit: int = Query(DEFAULT_PAGE, ge=1, le=MAX_PAGE),
    after: str | None = Query(None, description="The last id of the previous page."),
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> dict:
    """The documents the caller may read, by id, a page at a time (OpenAI's list shape: the
    next page is ?after=<last_id> while has_more)."""
    documents, more = await run_in_threadpool(state.documents.page, who, after, limit)
    access = access_for(who)
    return {
        "object": "list",
        "data": [document_json(d, access) for d in documents],
        "first_id": documents[0].doc_id if documents else None,
        "last_id": documents[-1].doc_id if documents else None,
        "has_more": more,
    }


@router.get("/v1/documents/{doc_id}", response_model=None, responses=json_body(Document))
async def get_document(
    doc_id: str, who: Principal = Depends(principal), state: ServerState = Depends(server_state)
) -> dict:
    document = await run_in_threadpool(state.documents.get, who, doc_id)
    return document_json(document, access_for(who))


@router.get(
    "/v1/documents/{doc_id}/chunks", response_model=None, responses=json_body(SearchResults)
)
async def document_chunks(
    doc_id: str, who: Principal = Depends(principal), state: ServerState = Depends(server_state)
) -> dict:
    """The document's current chunks in order, with their spans in its text."""
    chunks = await run_in_threadpool(state.documents.chunks, who, doc_id)
    return {"object": "list", "data": [chunk_json(c) for c in chunks]}


@router.delete("/v1/documents/{doc_id}", response_model=None, responses=json_body(Deleted))
async def delete_document(
    doc_id: str, who: Principal = Depends(principal), state: ServerState = Depends(server_state)
) -> dict:
    await run_in_threadpool(state.documents.delete, who, doc_id)
    return {"id": doc_id, "object": "document", "deleted": True}


@router.put(
    "/v1/documents/{doc_id}/acl",
    response_model=None,
    responses=json_body(Document | AclChanged),
)
async def set_acl(
    doc_id: str,
    body: AclBody,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> dict:
    acl = body.to_acl()
    document = await run_in_threadpool(state.documents.set_acl, who, doc_id, acl)
    if document is None:  # the caller removed itself from the ACL
        return {"id": doc_id, "object": "document", "acl": acl.as_json(), "permission": None}
    return document_json(document, access_for(who))


@router.post("/v1/search", response_model=None, responses=json_body(SearchResults))
async def search(
    body: SearchRequest,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> dict:
    chunks = await run_in_threadpool(
        state.rag.retriever.hybrid, access_for(who), body.query, body.top_k
    )
    return {"object": "list", "data": [chunk_json(c) for c in chunks]}
