"""The routes about the server itself: health, Prometheus metrics, the models it serves, who a
key belongs to, and the engine's state for administrators."""

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ragserve.access import Principal
from ragserve.engine.stats import EngineStats
from ragserve.server.dependencies import principal, require_admin, server_state
from ragserve.server.errors import APIError
from ragserve.server.protocol import error_responses, now
from ragserve.server.responses import (
    Health,
    Identity,
    ModelCard,
    ModelList,
    ServerStatus,
    json_body,
)
from ragserve.server.state import ServerState

router = APIRouter()


@router.get("/health", response_model=None, responses=json_body(Health) | error_responses(503))
async def health(state: ServerState = Depends(server_state)) -> dict[str, str]:
    if any(engine.error is not None for engine in state.engines):
        raise APIError(503, "the engine stopped", "server_error", "engine_dead")
    return {"status": "ok"}


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(state: ServerState = Depends(server_state)) -> Response:
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def model_cards(state: ServerState) -> list[dict[str, Any]]:
    card = {"object": "model", "created": now(), "owned_by": "ragserve"}
    context = {"max_model_len": state.engine.max_model_len}
    also = [
        {"id": served.id, **card, "max_model_len": served.engine.max_model_len}
        for served in state.also_served.values()
    ]
    return [
        {"id": state.model_id, **card, **context},
        {"id": state.rag_model_id, **card, **context},
        *also,
        {"id": state.settings.embedding_model_id, **card},
    ]


@router.get(
    "/v1/models",
    response_model=None,
    responses=json_body(ModelList) | error_responses(401, 429),
)
async def models(
    _: Principal = Depends(principal), state: ServerState = Depends(server_state)
) -> dict[str, Any]:
    return {"object": "list", "data": model_cards(state)}


@router.get(
    "/v1/models/{model_id}",
    response_model=None,
    responses=json_body(ModelCard) | error_responses(401, 404, 429),
)
async def model(
    model_id: str, _: Principal = Depends(principal), state: ServerState = Depends(server_state)
) -> dict[str, Any]:
    for card in model_cards(state):
        if card["id"] == model_id:
            return card
    raise APIError(
        404,
        f"model {model_id!r} is not served here",
        "invalid_request_error",
        "model_not_found",
    )


@router.get(
    "/v1/me", response_model=None, responses=json_body(Identity) | error_responses(401, 429)
)
async def me(who: Principal = Depends(principal)) -> dict[str, Any]:
    return {
        "user": who.user,
        "groups": sorted(who.groups),
        "tenant": who.tenant,
        "role": who.role.value,
    }


@router.get(
    "/v1/status",
    response_model=None,
    responses=json_body(ServerStatus) | error_responses(401, 403, 429),
)
async def status(
    who: Principal = Depends(principal), state: ServerState = Depends(server_state)
) -> dict[str, Any]:
    """The engine's load now and the latencies of the requests finished in the last
    minutes. The engine is shared by every tenant, so only administrators see it."""
    require_admin(who, "the server's status")
    by_replica = state.engine.replica_stats()
    stats = EngineStats.total(list(by_replica.values()))
    queries = stats.prefix_cache_queries
    return {
        "model": state.model_id,
        "running": stats.num_running,
        "waiting": stats.num_waiting,
        "kv_cache_usage": round(stats.kv_cache_usage, 4),
        "kv_blocks_total": stats.kv_blocks_total,
        "kv_blocks_free": stats.kv_blocks_free,
        "prefix_cache_hit_rate": (round(stats.prefix_cache_hits / queries, 4) if queries else None),
        "preemptions": stats.num_preemptions,
        "recent": state.metrics.recent.summary(),
        "replicas": {
            name: {
                "running": s.num_running,
                "waiting": s.num_waiting,
                "kv_cache_usage": round(s.kv_cache_usage, 4),
            }
            for name, s in sorted(by_replica.items())
        },
    }
