"""Document versions over HTTP: the versions a caller may read, one version's chunks, and a
restore for those who may manage the document. Who may see which version is the store's rule
(Store.document_versions); the routes only shape it."""

from fastapi import APIRouter, Depends, Path
from starlette.concurrency import run_in_threadpool

from ragserve.access import Principal, access_for
from ragserve.rag.documents import (
    ScoredChunk,
    chunk_json,
    document_json,
    version_json,
)
from ragserve.server.dependencies import principal, server_state
from ragserve.server.protocol import error_responses
from ragserve.server.responses import (
    Document,
    DocumentVersionList,
    SearchResults,
    StoredOutOfSight,
    json_body,
)
from ragserve.server.state import ServerState
from ragserve.serving.errors import NotFound

router = APIRouter(responses=error_responses(401, 403, 404, 429))


@router.get(
    "/v1/documents/{doc_id}/versions",
    response_model=None,
    responses=json_body(DocumentVersionList),
)
async def document_versions(
    doc_id: str, who: Principal = Depends(principal), state: ServerState = Depends(server_state)
) -> dict:
    """The current version and the earlier ones kept (document_versions_kept) that the caller
    could read then and may read now, newest first."""
    versions = await run_in_threadpool(state.documents.versions, who, doc_id)
    access = access_for(who)
    data = [version_json(v, versions[0], access) for v in versions]
    return {"object": "list", "id": doc_id, "data": data}


@router.get(
    "/v1/documents/{doc_id}/versions/{version}",
    response_model=None,
    responses=json_body(SearchResults),
)
async def document_version(
    doc_id: str,
    version: int = Path(ge=1),
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> dict:
    """One version's chunks in order, with their spans in that version's text."""
    record, chunks = await run_in_threadpool(state.documents.version, who, doc_id, version)
    data = [
        chunk_json(
            ScoredChunk(
                c.chunk_id,
                c.doc_id,
                record.title,
                record.source,
                c.index,
                c.start,
                c.end,
                c.text,
                0.0,
                version=record.version,
            )
        )
        for c in chunks
    ]
    return {"object": "list", "data": data}


@router.post(
    "/v1/documents/{doc_id}/versions/{version}/restore",
    response_model=None,
    responses=json_body(Document | StoredOutOfSight),
)
async def restore_version(
    doc_id: str,
    version: int = Path(ge=1),
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> dict:
    """Write an earlier version back as the newest, for those who may manage the document;
    its ACL becomes the grants that the current ACL and the version's both make."""
    restored = await run_in_threadpool(state.documents.restore, who, doc_id, version)
    try:
        document = await run_in_threadpool(state.documents.get, who, doc_id)
    except NotFound:  # the restored ACL leaves the caller out
        return {"id": doc_id, "object": "document", "version": restored.version, "permission": None}
    return document_json(document, access_for(who))
