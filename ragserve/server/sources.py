"""Sources over HTTP, for a tenant's administrators: GET /v1/sources (with each one's last
sync), POST /v1/sources (a folder under source_folders_root), POST /v1/sources/{name}/sync,
DELETE /v1/sources/{name}. The command line has the same (`ragserve sync`)."""

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ragserve.access import Principal
from ragserve.rag.sources.acl_map import AclMap, AclMapError
from ragserve.rag.sources.registry import SOURCE_NAME, SourceConfig
from ragserve.server.dependencies import principal, server_state
from ragserve.server.errors import invalid
from ragserve.server.protocol import error_responses
from ragserve.server.state import ServerState


class SourceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=f"^{SOURCE_NAME.pattern}$")
    # Relative to source_folders_root (or absolute, inside it).
    folder: str = Field(min_length=1)
    # {"default": {...}, "rules": [{"path": glob, "users": ..., "groups": ...}]}.
    acl_map: dict[str, Any] = Field(default_factory=dict)
    include: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    exclude: list[str] = Field(default_factory=list)
    # Seconds between syncs the server runs by itself; none: only when asked.
    every_s: float | None = Field(None, ge=60)


def source_json(config: SourceConfig, report: dict[str, Any] | None) -> dict[str, Any]:
    return {"object": "source"} | asdict(config) | {"last_report": report}


router = APIRouter(responses=error_responses(401, 403, 404, 429))


@router.get("/v1/sources", response_model=None)
async def list_sources(
    who: Principal = Depends(principal), state: ServerState = Depends(server_state)
) -> dict[str, Any]:
    listed = await run_in_threadpool(state.sources.listed, who)
    return {"object": "list", "data": [source_json(c, r) for c, r in listed]}


@router.post("/v1/sources", response_model=None, responses=error_responses(400, 409))
async def add_source(
    body: SourceRequest,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> JSONResponse:
    try:
        rules = AclMap.from_json(body.acl_map)
    except AclMapError as error:
        raise invalid(str(error), "invalid_acl_map", param="acl_map") from error
    config = SourceConfig(
        body.name,
        body.folder,
        acl_map=rules.to_json(),
        include=body.include,
        exclude=body.exclude,
        every_s=body.every_s,
    )
    added = await run_in_threadpool(state.sources.add, who, config)
    return JSONResponse(source_json(added, None), status_code=201)


@router.post("/v1/sources/{name}/sync", response_model=None, responses=error_responses(400))
async def sync_source(
    name: str, who: Principal = Depends(principal), state: ServerState = Depends(server_state)
) -> dict[str, Any]:
    """Sync now; the report says what was added, changed, deleted, unchanged, re-permissioned
    and what failed, with reasons."""
    report = await run_in_threadpool(state.sources.sync, who, name)
    return {"object": "source.sync"} | report.as_json()


@router.delete("/v1/sources/{name}", response_model=None)
async def remove_source(
    name: str, who: Principal = Depends(principal), state: ServerState = Depends(server_state)
) -> dict[str, Any]:
    """Stop following the source; its documents stay in the index."""
    await run_in_threadpool(state.sources.remove, who, name)
    return {"id": name, "object": "source", "deleted": True}
