"""Sources over HTTP, for a tenant's administrators: GET /v1/sources (with each one's last
sync), POST /v1/sources (a folder under source_folders_root, or a website on a host of
source_url_hosts), PATCH /v1/sources/{name} (its ACL map, globs, interval, caps), POST
/v1/sources/{name}/sync, DELETE /v1/sources/{name}. The command line has the same (`ragserve
sync`)."""

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ragserve.access import Principal
from ragserve.rag.sources.acl_map import AclMap, AclMapError
from ragserve.rag.sources.registry import SOURCE_NAME, SourceConfig, SourceError
from ragserve.server.dependencies import principal, server_state
from ragserve.server.errors import invalid
from ragserve.server.protocol import error_responses
from ragserve.server.state import ServerState


class SourceChange(BaseModel):
    """What PATCH may change; what a request leaves out stays as it is."""

    model_config = ConfigDict(extra="forbid")

    # {"default": {...}, "rules": [{"path": glob, "users": ..., "groups": ...}]}.
    acl_map: dict[str, Any] | None = None
    include: list[str] | None = Field(None, min_length=1)
    exclude: list[str] | None = None
    # Seconds between syncs the server runs by itself; none: only when asked.
    every_s: float | None = Field(None, ge=60)
    # A website's page cap and the links a crawl follows from its start page.
    max_pages: int | None = Field(None, ge=1, le=100_000)
    max_depth: int | None = Field(None, ge=0, le=50)


class SourceRequest(SourceChange):
    name: str = Field(pattern=f"^{SOURCE_NAME.pattern}$")
    # One of the two: a folder relative to source_folders_root (or absolute, inside it), or
    # a website's start page or sitemap.
    folder: str | None = Field(None, min_length=1)
    url: str | None = Field(None, min_length=1, max_length=2048)


def acl_map_of(body: SourceChange) -> dict[str, Any] | None:
    if body.acl_map is None:
        return None
    try:
        return AclMap.from_json(body.acl_map).to_json()
    except AclMapError as error:
        raise invalid(str(error), "invalid_acl_map", param="acl_map") from error


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
    given = body.model_dump(exclude_none=True, exclude={"acl_map"})
    try:
        config = SourceConfig(**given, acl_map=acl_map_of(body) or AclMap.from_json({}).to_json())
    except SourceError as error:
        raise invalid(str(error), "invalid_source") from error
    added = await run_in_threadpool(state.sources.add, who, config)
    return JSONResponse(source_json(added, None), status_code=201)


@router.patch("/v1/sources/{name}", response_model=None, responses=error_responses(400))
async def change_source(
    name: str,
    body: SourceChange,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> dict[str, Any]:
    """Change what a source's next sync does: a new ACL map re-permissions the documents
    whose ACL changed without reading them again."""
    changes = body.model_dump(exclude_none=True, exclude={"acl_map"})
    if (rules := acl_map_of(body)) is not None:
        changes["acl_map"] = rules
    changed = await run_in_threadpool(state.sources.change, who, name, changes)
    return source_json(*changed)


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
