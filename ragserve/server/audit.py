"""GET /v1/audit: the tenant's audit trail, for its administrators only."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.concurrency import run_in_threadpool

from ragserve.access import Principal
from ragserve.audit import MAX_AUDIT_PAGE, merge_audit
from ragserve.server.dependencies import principal, server_state
from ragserve.server.protocol import error_responses
from ragserve.server.responses import AuditLog, json_body
from ragserve.server.state import ServerState

router = APIRouter()


@router.get(
    "/v1/audit",
    response_model=None,
    responses=json_body(AuditLog) | error_responses(401, 403, 429),
)
async def audit(
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
    limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_PAGE)] = 100,
    before: Annotated[
        float | None, Query(description="Only entries older than this (epoch seconds).")
    ] = None,
) -> dict[str, Any]:
    """Document writes, deletes, ACL changes and key changes of the caller's tenant,
    newest first. Page back with `before` set to the last entry's `at`."""
    documents = await run_in_threadpool(state.documents.audit_log, who, limit, before)
    keys = await run_in_threadpool(state.keys.audit_log, who.tenant, limit, before)
    entries = merge_audit(documents, keys, limit=limit)
    return {"object": "list", "data": [entry.as_json() for entry in entries]}
