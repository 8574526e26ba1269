"""The FastAPI application: the factory, error handlers, the principal dependency, and the
small routes (health, metrics, models, embeddings); completions, answers and documents have
routers of their own. Every refusal is an OpenAI-style error body with the matching status.
"""

import base64
import contextlib
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from ragserve.engine.engine import LLMEngine
from ragserve.rag.embeddings import Embedder
from ragserve.server.answers import answer_routes
from ragserve.server.async_engine import AsyncEngine
from ragserve.server.auth import KeyStore, Principal
from ragserve.server.completions import completion_routes, ignored_fields, tell_ignored
from ragserve.server.documents import document_routes
from ragserve.server.limits import UserLimiter
from ragserve.server.metrics import ServerMetrics
from ragserve.server.protocol import EmbeddingRequest, error_body, now
from ragserve.server.response_cache import ResponseCache
from ragserve.server.settings import ServerSettings
from ragserve.server.state import APIError, RagServices, ServerState, weights_version


def build_app(
    settings: ServerSettings,
    engine: LLMEngine | None = None,
    embedder: Embedder | None = None,
) -> FastAPI:
    engine = engine or LLMEngine(settings.engine_config())
    embedder = embedder or Embedder(settings.embedding_model)
    rag = RagServices.build(settings, engine, embedder)
    template = engine.tokenizer.chat_template or ""
    state = ServerState(
        settings=settings,
        engine=engine,
        async_engine=AsyncEngine(engine),
        keys=KeyStore(settings.data_dir / "keys.sqlite"),
        limiter=UserLimiter(
            settings.max_concurrent_requests_per_user, settings.tokens_per_minute_per_user
        ),
        metrics=ServerMetrics(engine),
        cache=ResponseCache(settings.response_cache_ttl_s, settings.response_cache_max_entries)
        if settings.response_cache
        else None,
        model_id=Path(settings.model).name,
        weights_version=weights_version(engine.model_path),
        template_version=hashlib.sha256(template.encode()).hexdigest()[:16],
        rag=rag,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.async_engine.start()
        yield
        state.async_engine.shutdown()
        rag.store.close()

    app = FastAPI(title="ragserve", lifespan=lifespan)
    app.state.ragserve = state

    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError) -> JSONResponse:
        headers = {}
        if error.retry_after_s is not None:
            headers["Retry-After"] = str(max(1, round(error.retry_after_s)))
        return JSONResponse(
            error_body(error.message, error.type, error.code, error.param),
            error.status,
            headers=headers,
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = [
            (
                ".".join(str(p) for p in e["loc"][1:]) or "body",
                e["msg"].removeprefix("Value error, "),
            )
            for e in error.errors()
        ]
        message = "; ".join(f"{where}: {what}" for where, what in problems)
        state.metrics.requests_rejected.labels(reason="invalid").inc()
        return JSONResponse(
            error_body(message, "invalid_request_error", "invalid_request", problems[0][0]), 400
        )

    def principal(request: Request) -> Principal:
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            state.metrics.requests_rejected.labels(reason="unauthenticated").inc()
            raise APIError(
                401,
                "missing API key: send Authorization: Bearer <key>",
                "authentication_error",
                "missing_api_key",
            )
        found = state.keys.authenticate(key.strip())
        if found is None:
            state.metrics.requests_rejected.labels(reason="unauthenticated").inc()
            raise APIError(
                401, "invalid or revoked API key", "authentication_error", "invalid_api_key"
            )
        return found

    @app.get("/health")
    async def health() -> dict[str, str]:
        if state.async_engine.error is not None:
            raise APIError(503, "the engine stopped", "server_error", "engine_dead")
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def model_cards() -> list[dict[str, Any]]:
        created = now()
        card = {"object": "model", "created": created, "owned_by": "ragserve"}
        context = {"max_model_len": engine.max_model_len}
        return [
            {"id": state.model_id, **card, **context},
            {"id": state.rag_model_id, **card, **context},
            {"id": settings.embedding_model_id, **card},
        ]

    @app.get("/v1/models")
    async def models(_: Principal = Depends(principal)) -> dict[str, Any]:
        return {"object": "list", "data": model_cards()}

    @app.get("/v1/models/{model_id}")
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

    @app.post("/v1/embeddings")
    async def embeddings(body: EmbeddingRequest, who: Principal = Depends(principal)) -> Response:
        ignored = ignored_fields(state, body)
        if body.model != settings.embedding_model_id:
            raise APIError(
                404,
                f"model {body.model!r} is not served; embeddings use "
                f"{settings.embedding_model_id!r}",
                "invalid_request_error",
                "model_not_found",
            )
        if body.dimensions is not None and body.dimensions != embedder.dimension:
            raise APIError(
                400,
                f"{settings.embedding_model_id} gives {embedder.dimension}-dimensional vectors "
                "and was not trained to be shortened: leave dimensions out",
                "invalid_request_error",
                "invalid_parameter",
                param="dimensions",
            )
        try:
            texts = embedding_texts(body.input, embedder)
        except ValueError as error:
            raise APIError(
                400, str(error), "invalid_request_error", "invalid_parameter", param="input"
            ) from error
        vectors = await run_in_threadpool(embedder.embed, texts)
        tokens = await run_in_threadpool(embedder.count_tokens, texts)
        response = JSONResponse(
            {
                "object": "list",
                "model": body.model,
                "data": [
                    {
                        "object": "embedding",
                        "index": i,
                        # base64 carries the little-endian float32 bytes, as OpenAI sends them.
                        "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode()
                        if body.encoding_format == "base64"
                        else v.tolist(),
                    }
                    for i, v in enumerate(vectors)
                ],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )
        return tell_ignored(response, ignored)

    app.include_router(completion_routes(state, principal))
    app.include_router(document_routes(state, principal))
    app.include_router(answer_routes(state, principal))
    return app


def embedding_texts(
    given: str | list[str] | list[int] | list[list[int]], embedder: Embedder
) -> list[str]:
    """The texts to embed. Token ids are read in the embedding model's own vocabulary (as vLLM
    reads them), decoded, and embedded as text."""
    if isinstance(given, str):
        return [given]
    if all(isinstance(item, str) for item in given):
        return list(given)  # type: ignore[arg-type]
    if all(isinstance(item, int) for item in given):
        return [embedder.decode(given)]  # type: ignore[arg-type]
    return [embedder.decode(ids) for ids in given]  # type: ignore[arg-type]
