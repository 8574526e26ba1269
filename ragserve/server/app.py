"""The FastAPI application: the factory (server state from the composition root), the engine's
lifespan, the error handlers, one router per API family (system, completions, tokenize,
embeddings, rerank, answers, history, documents, sources, audit), the schedule of source
syncs, and the web page at /. Every refusal is an OpenAI-style error body with the matching
status.
"""

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragserve.engine.async_engine import AsyncEngine
from ragserve.engine.client import EngineClient
from ragserve.history import QueryHistory
from ragserve.keys import KeyStore
from ragserve.rag.embeddings import Embedder
from ragserve.rag.rerank import LLMReranker, Reranker
from ragserve.rag.sources.registry import SourceRegistry
from ragserve.server import (
    answers,
    audit,
    completions,
    documents,
    embeddings,
    history,
    rerank,
    sources,
    system,
    tokenize,
    versions,
)
from ragserve.server.errors import APIError, Rejection, error_body, from_service
from ragserve.server.gate import BodyCaps, RequestGate
from ragserve.server.limits import AuthThrottle, DemandLimiter, UserLimiter
from ragserve.server.metrics import ServerMetrics
from ragserve.server.protocol import ERROR_STATUSES
from ragserve.server.response_cache import ResponseCache
from ragserve.server.state import ServedModel, ServerState
from ragserve.server.tracing import Tracing
from ragserve.server.web import mount_web
from ragserve.services import RagServices, build_embedder, build_engine
from ragserve.serving.errors import ServiceError
from ragserve.serving.sources import SourceService
from ragserve.settings import Settings

logger = logging.getLogger(__name__)


def build_app(
    settings: Settings,
    engine: EngineClient | None = None,
    embedder: Embedder | None = None,
    limiter: DemandLimiter | None = None,
) -> FastAPI:
    """The API over an engine (default: the configured model in this process) and per-user
    limits (default: this process's own)."""
    state = build_state(settings, engine, embedder, limiter)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for engine in state.engines:
            engine.start()
        schedule = asyncio.create_task(sync_when_due(state))
        yield
        schedule.cancel()
        for engine in state.engines:
            engine.shutdown()
        state.rag.store.close()
        state.tracing.shutdown()
        if state.history is not None:
            state.history.close()

    app = FastAPI(title="ragserve", lifespan=lifespan)
    app.state.ragserve = state
    app.add_middleware(
        RequestGate,
        state=state,
        respond=functools.partial(refusal, state),
        default=BodyCaps.api(settings.max_request_bytes),
        caps={"/v1/documents": BodyCaps.upload(settings.max_upload_bytes)},
    )
    add_error_handlers(app, state)
    for router in (
        system.router,
        completions.router,
        tokenize.router,
        embeddings.router,
        rerank.router,
        answers.router,
        history.router,
        documents.router,
        versions.router,
        sources.router,
        audit.router,
    ):
        app.include_router(router)
    mount_web(app)
    app.openapi = lambda: openapi_document(app)  # type: ignore[method-assign]
    return app


async def sync_when_due(state: ServerState) -> None:
    """Sync the sources whose interval has passed, one at a time, checking every
    source_check_interval_s; a failed sync is logged and tried again at its next turn."""
    while True:
        await asyncio.sleep(state.settings.source_check_interval_s)
        if state.sources is None:
            continue
        for config in await asyncio.to_thread(state.sources.due):
            try:
                await asyncio.to_thread(state.sources.run, config)
            except Exception:  # one source's failure must not stop the others' syncs
                logger.exception("sync of source %r failed", config.name)


def build_state(
    settings: Settings,
    engine: EngineClient | None,
    embedder: Embedder | None,
    limiter: DemandLimiter | None,
) -> ServerState:
    """What the routes share, built from settings; the engine, embedder and limiter when given."""
    engine = engine or AsyncEngine(build_engine(settings))
    embedder = embedder or build_embedder(settings)
    default = ServedModel.of(engine, Path(settings.model).name)
    also_served = {}
    for name in settings.also_serve:
        other = settings.model_copy(update={"model": name})
        served = ServedModel.of(AsyncEngine(build_engine(other)), Path(name).name)
        also_served[served.id] = served
    rag = RagServices.build(settings, engine, embedder)
    sources = SourceRegistry(settings.sources_path)
    metrics = ServerMetrics(engine)
    metrics.watch_sources(sources)
    rerankers: dict[str, Reranker] = {default.id: LLMReranker(engine.tokenizer)}
    if settings.reranker and rag.answers.reranker is not None and settings.reranker != "llm":
        rerankers[Path(settings.reranker).name] = rag.answers.reranker
    return ServerState(
        settings=settings,
        engine=engine,
        keys=KeyStore(settings.keys_path),
        limiter=limiter
        or UserLimiter(
            settings.max_concurrent_requests_per_user, settings.tokens_per_minute_per_user
        ),
        auth_throttle=AuthThrottle(settings.auth_failures_per_minute),
        metrics=metrics,
        cache=ResponseCache(settings.response_cache_ttl_s, settings.response_cache_max_entries)
        if settings.response_cache
        else None,
        model_id=default.id,
        weights_version=default.weights_version,
        template_version=default.template_version,
        rag=rag,
        rerankers=rerankers,
        tracing=Tracing.to(settings.otlp_traces_endpoint),
        sources=SourceService(
            rag.index, sources, settings.source_folders_root, settings.source_url_hosts
        ),
        history=QueryHistory(
            settings.history_path,
            settings.history_retention_days,
            settings.history_identities,
        ),
        also_served=also_served,
    )


def refusal(state: ServerState, error: APIError) -> JSONResponse:
    """An APIError as its response, counted by its rejection reason."""
    if error.rejection is not None:
        state.metrics.requests_rejected.labels(reason=error.rejection).inc()
    return JSONResponse(
        error_body(error.message, error.type, error.code, error.param),
        error.status,
        headers=error.headers(),
    )


def add_error_handlers(app: FastAPI, state: ServerState) -> None:
    """Every refusal in the OpenAI error shape: the app's own, a service's, a body that fails
    validation (400, not FastAPI's 422), Starlette's (no such route...), and a bug's (500)."""

    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError) -> JSONResponse:
        return refusal(state, error)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, error: ServiceError) -> JSONResponse:
        return refusal(state, from_service(error))

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
        state.metrics.requests_rejected.labels(reason=Rejection.INVALID).inc()
        return JSONResponse(
            error_body(message, "invalid_request_error", "invalid_request", problems[0][0]), 400
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        # Starlette's own refusals (no such route, wrong method, a body FastAPI cannot read),
        # in the API's error shape rather than {"detail": ...}.
        code = HTTPStatus(error.status_code).phrase.lower().replace(" ", "_")
        kind = "server_error" if error.status_code >= 500 else "invalid_request_error"
        message = f"{request.method} {request.url.path}: {error.detail}"
        return JSONResponse(
            error_body(message, kind, code), error.status_code, headers=error.headers
        )

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception) -> JSONResponse:
        # A bug: the client gets the error shape without internals; Starlette still re-raises
        # the exception after this response, so the server logs its traceback.
        return JSONResponse(
            error_body("internal server error", "server_error", "internal_error"), 500
        )


ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
INVALID_BODY = {"description": ERROR_STATUSES[400], "content": ERROR_CONTENT}
TOO_LARGE = {"description": ERROR_STATUSES[413], "content": ERROR_CONTENT}


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's OpenAPI document, corrected where the app differs from FastAPI's defaults: a
    body that fails validation is a 400 with the OpenAI error shape, not a 422; every body has
    a cap (RequestGate), a 413 past it."""
    if app.openapi_schema is None:
        document = get_openapi(title=app.title, version=app.version, routes=app.routes)
        for path in document["paths"].values():
            for operation in path.values():
                responses = operation["responses"]
                if responses.pop("422", None) is not None:
                    responses.setdefault("400", INVALID_BODY)
                if "requestBody" in operation:
                    responses.setdefault("413", TOO_LARGE)
        app.openapi_schema = document
    return app.openapi_schema
