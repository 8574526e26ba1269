"""Document and search routes. Who may do what:

- anyone with a key reads (lists, fetches, searches) only the documents its ACL admits;
- a writer (or admin) of the tenant adds documents, and deletes or re-permissions those it can
  see; a reader gets 403 for those;
- a document the caller cannot see is 404 whatever the operation, so nothing is learned about it.
"""

import json
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from ragserve.rag.documents import Acl, DocumentRecord, ScoredChunk
from ragserve.rag.ingest import SourceDocument
from ragserve.rag.parsers import parse_text
from ragserve.server.auth import Principal
from ragserve.server.state import APIError, ServerState, access_for

DOC_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"


class AclBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    users: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)

    def to_acl(self) -> Acl:
        return Acl.of(self.users, self.groups)


class DocumentText(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1)
    title: str | None = None
    source: str | None = None
    doc_id: str | None = Field(None, pattern=DOC_ID_PATTERN)
    acl: AclBody = Field(default_factory=AclBody)


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=4000)
    top_k: int | None = Field(None, ge=1, le=100)


def document_json(document: DocumentRecord) -> dict[str, Any]:
    return {
        "id": document.doc_id,
        "object": "document",
        "title": document.title,
        "source": document.source,
        "owner": document.owner,
        "version": document.version,
        "acl": {"users": list(document.acl.users), "groups": list(document.acl.groups)},
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


def _bad_request(message: str, code: str = "invalid_request") -> APIError:
    return APIError(400, message, "invalid_request_error", code)


def _not_found(doc_id: str) -> APIError:
    return APIError(404, f"no document {doc_id!r}", "invalid_request_error", "not_found")


def _forbidden() -> APIError:
    return APIError(
        403,
        "this key may read documents but not change them (role reader)",
        "permission_error",
        "forbidden",
    )


def document_routes(state: ServerState, principal: Callable[..., Principal]) -> APIRouter:
    router = APIRouter()
    settings = state.settings

    async def source_from_multipart(request: Request) -> tuple[SourceDocument, Acl]:
        form = await request.form(max_part_size=settings.max_upload_bytes)
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise _bad_request("multipart upload needs a 'file' part")
        data = await upload.read(settings.max_upload_bytes + 1)
        if len(data) > settings.max_upload_bytes:
            raise _bad_request(
                f"file larger than {settings.max_upload_bytes} bytes", "file_too_large"
            )
        try:
            acl = AclBody.model_validate(json.loads(str(form.get("acl") or "{}"))).to_acl()
            doc_id = form.get("doc_id")
            if doc_id is not None:
                DocumentText(text="-", doc_id=str(doc_id))  # validates the pattern
        except (ValueError, ValidationError) as error:
            raise _bad_request(f"bad 'acl' or 'doc_id' field: {error}") from error
        name = upload.filename or "upload"
        return SourceDocument(name, data=data, doc_id=str(doc_id) if doc_id else None), acl

    async def source_from_json(request: Request) -> tuple[SourceDocument, Acl]:
        try:
            body = DocumentText.model_validate(await request.json())
        except (ValueError, ValidationError) as error:
            raise _bad_request(f"bad document body: {error}") from error
        source = body.source or f"text:{uuid.uuid4().hex[:12]}"
        parsed = parse_text(body.text, source)
        parsed.title = body.title or parsed.title
        return SourceDocument(source, parsed=parsed, doc_id=body.doc_id), body.acl.to_acl()

    @router.post("/v1/documents", status_code=201)
    async def add_document(request: Request, who: Principal = Depends(principal)) -> dict:
        if not who.can_write():
            raise _forbidden()
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            item, acl = await source_from_multipart(request)
        else:
            item, acl = await source_from_json(request)
        access = access_for(who)
        if item.doc_id is not None:
            exists = await run_in_threadpool(
                state.rag.store.current_version, who.tenant, item.doc_id
            )
            visible = await run_in_threadpool(state.rag.store.get_document, access, item.doc_id)
            if exists and visible is None:
                # Same answer as for any id in use: nothing about the hidden document leaks.
                raise APIError(
                    409,
                    f"document id {item.doc_id!r} is not available",
                    "invalid_request_error",
                    "conflict",
                )
        result = await run_in_threadpool(state.rag.ingestor.ingest, item, who.tenant, who.user, acl)
        if not result.ok:
            raise _bad_request(result.error or "cannot ingest", "unparseable_document")
        document = await run_in_threadpool(state.rag.store.get_document, access, result.doc_id)
        assert document is not None
        return document_json(document) | {
            "embedded_chunks": result.embedded,
            "reused_chunks": result.reused,
        }

    @router.get("/v1/documents")
    async def list_documents(who: Principal = Depends(principal)) -> dict:
        documents = await run_in_threadpool(state.rag.store.list_documents, access_for(who))
        return {"object": "list", "data": [document_json(d) for d in documents]}

    async def visible_document(who: Principal, doc_id: str) -> DocumentRecord:
        document = await run_in_threadpool(state.rag.store.get_document, access_for(who), doc_id)
        if document is None:
            raise _not_found(doc_id)
        return document

    @router.get("/v1/documents/{doc_id}")
    async def get_document(doc_id: str, who: Principal = Depends(principal)) -> dict:
        return document_json(await visible_document(who, doc_id))

    @router.delete("/v1/documents/{doc_id}")
    async def delete_document(doc_id: str, who: Principal = Depends(principal)) -> dict:
        await visible_document(who, doc_id)
        if not who.can_write():
            raise _forbidden()
        if not await run_in_threadpool(state.rag.store.delete_document, access_for(who), doc_id):
            raise _not_found(doc_id)
        return {"id": doc_id, "object": "document", "deleted": True}

    @router.put("/v1/documents/{doc_id}/acl")
    async def set_acl(doc_id: str, body: AclBody, who: Principal = Depends(principal)) -> dict:
        await visible_document(who, doc_id)
        if not who.can_write():
            raise _forbidden()
        access = access_for(who)
        if not await run_in_threadpool(state.rag.store.set_acl, access, doc_id, body.to_acl()):
            raise _not_found(doc_id)
        document = await run_in_threadpool(state.rag.store.get_document, access, doc_id)
        if document is None:  # the writer removed itself from the ACL
            return {"id": doc_id, "object": "document", "acl": body.model_dump()}
        return document_json(document)

    @router.post("/v1/search")
    async def search(body: SearchRequest, who: Principal = Depends(principal)) -> dict:
        chunks = await run_in_threadpool(
            state.rag.retriever.hybrid, access_for(who), body.query, body.top_k
        )
        return {"object": "list", "data": [chunk_json(c) for c in chunks]}

    return router
