"""The routes about the server itself: health, Prometheus metrics, and the models it serves."""

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ragserve.access import Principal
from ragserve.server.dependencies import principal
from ragserve.server.errors import APIError
from ragserve.server.protocol import error_responses, now
from ragserve.server.responses import Health, ModelCard, ModelList, json_body
from ragserve.server.state import ServerState


def system_routes(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.get("/health", response_model=None, responses=json_body(Health) | error_responses(503))
    async def health() -> dict[str, str]:
        if state.async_engine.error is not None:
            raise APIError(503, "the engine stopped", "server_error", "engine_dead")
        return {"status": "ok"}

    @router.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def model_cards() -> list[dict[str, Any]]:
        card = {"object": "model", "created": now(), "owned_by": "ragserve"}
        context = {"max_model_len": state.engine.max_model_len}
        return [
            {"id": state.model_id, **card, **context},
            {"id": state.rag_model_id, **card, **context},
            {"id": state.settings.embedding_model_id, **card},
        ]

    @router.get(
        "/v1/models",
        response_model=None,
        responses=json_body(ModelList) | error_responses(401, 429),
    )
    async def models(_: Principal = Depends(principal)) -> dict[str, Any]:
        return {"object": "list", "data": model_cards()}

    @router.get(
        "/v1/models/{model_id}",
        response_model=None,
        responses=json_body(ModelCard) | error_responses(401, 404, 429),
    )
    async def model(model_id: str, _: Principal = Depends(principal)) -> dict[str, Any]:
        for card in model_cards():
            if card["id"] == model_id:
                return card
        raise APIError(
            404,
            f"model {model_id!r} is not served here",
            "invalid_request_error",
            "model_not_found",
        )

    return router
