"""The FastAPI application: routes, auth, limits, response cache and streaming.

Request path: authenticate -> validate -> per-user limits -> [response cache] -> engine ->
stream or collect. Every refusal is an OpenAI-style error body with the matching status.
"""

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from ragserve.engine.engine import LLMEngine
from ragserve.engine.errors import EngineError, EngineOverloadedError
from ragserve.engine.outputs import RequestOutput
from ragserve.engine.sampling_params import SamplingParams
from ragserve.rag.embeddings import Embedder
from ragserve.server.answers import answer_routes, rag_chat_completion
from ragserve.server.async_engine import AsyncEngine, EngineDeadError, RequestStream
from ragserve.server.auth import KeyStore, Principal
from ragserve.server.documents import document_routes
from ragserve.server.limits import LimitExceeded, UserLimiter
from ragserve.server.metrics import ServerMetrics
from ragserve.server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    PromptTokensDetails,
    SamplingFields,
    Usage,
    error_body,
    new_id,
    now,
)
from ragserve.server.response_cache import ResponseCache, cache_key
from ragserve.server.settings import ServerSettings
from ragserve.server.state import APIError, RagServices, ServerState, weights_version

logger = logging.getLogger(__name__)

DISCONNECT_POLL_S = 0.1


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
            error_body(error.message, error.type, error.code), error.status, headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}"
            for e in error.errors()
        )
        state.metrics.requests_rejected.labels(reason="invalid").inc()
        return JSONResponse(error_body(problems, "invalid_request_error", "invalid_request"), 400)

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

    @app.get("/v1/models")
    async def models(_: Principal = Depends(principal)) -> dict[str, Any]:
        created = now()
        return {
            "object": "list",
            "data": [
                {
                    "id": state.model_id,
                    "object": "model",
                    "created": created,
                    "owned_by": "ragserve",
                    "max_model_len": engine.max_model_len,
                },
                {
                    "id": state.rag_model_id,
                    "object": "model",
                    "created": created,
                    "owned_by": "ragserve",
                    "max_model_len": engine.max_model_len,
                },
                {
                    "id": settings.embedding_model_id,
                    "object": "model",
                    "created": created,
                    "owned_by": "ragserve",
                },
            ],
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(
        body: ChatCompletionRequest, request: Request, who: Principal = Depends(principal)
    ) -> Response:
        if body.model == state.rag_model_id:
            questions = [m.text() for m in body.messages if m.role == "user"]
            if not questions or not questions[-1].strip():
                raise APIError(
                    400,
                    "a RAG chat needs a user message",
                    "invalid_request_error",
                    "invalid_messages",
                )
            return await rag_chat_completion(state, who, questions[-1], body.stream)
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        try:
            prompt = engine.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        except Exception as error:  # a template may refuse a conversation shape
            raise APIError(
                400,
                f"cannot apply the chat template: {error}",
                "invalid_request_error",
                "invalid_messages",
            ) from error
        token_ids = engine.tokenizer.encode(prompt, add_special_tokens=False)
        return await complete(state, body, token_ids, request, who, chat=True)

    @app.post("/v1/completions")
    async def completions(
        body: CompletionRequest, request: Request, who: Principal = Depends(principal)
    ) -> Response:
        if isinstance(body.prompt, str):
            token_ids = engine.tokenizer.encode(body.prompt, add_special_tokens=False)
        else:
            token_ids = list(body.prompt)
        return await complete(state, body, token_ids, request, who, chat=False)

    @app.post("/v1/embeddings")
    async def embeddings(
        body: EmbeddingRequest, who: Principal = Depends(principal)
    ) -> dict[str, Any]:
        if body.model != settings.embedding_model_id:
            raise APIError(
                404,
                f"model {body.model!r} is not served; embeddings use "
                f"{settings.embedding_model_id!r}",
                "invalid_request_error",
                "model_not_found",
            )
        texts = [body.input] if isinstance(body.input, str) else body.input
        vectors = await run_in_threadpool(embedder.embed, texts)
        tokens = await run_in_threadpool(embedder.count_tokens, texts)
        return {
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

    app.include_router(document_routes(state, principal))
    app.include_router(answer_routes(state, principal))
    return app


def _sampling_params(state: ServerState, body: SamplingFields, prompt_len: int) -> SamplingParams:
    settings = state.settings
    requested = body.requested_max_tokens  # type: ignore[attr-defined]
    if requested is not None and requested > settings.max_tokens_cap:
        raise APIError(
            400,
            f"max_tokens is {requested}; this server allows at most {settings.max_tokens_cap}",
            "invalid_request_error",
            "max_tokens_too_large",
        )
    room = state.engine.max_model_len - prompt_len
    if room < 1:
        raise APIError(
            400,
            f"the prompt has {prompt_len} tokens; this model's context is "
            f"{state.engine.max_model_len} tokens (max_model_len)",
            "invalid_request_error",
            "context_length_exceeded",
        )
    max_tokens = requested if requested is not None else min(settings.default_max_tokens, room)
    try:
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            seed=body.seed,
            stop=body.stop,
            stop_token_ids=body.stop_token_ids,
            ignore_eos=body.ignore_eos,
        )
    except EngineError as error:
        raise APIError(400, str(error), "invalid_request_error", "invalid_parameter") from error


def _usage(output: RequestOutput) -> Usage:
    prompt = len(output.prompt_token_ids)
    completion = len(output.outputs[0].token_ids)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=output.num_cached_tokens),
    )


def _finish_reason(reason: str | None) -> str | None:
    return {"stop": "stop", "length": "length", "abort": "abort"}.get(reason or "", reason)


@dataclass
class Completion:
    """What a response is made of; also what the response cache stores."""

    text: str
    finish_reason: str | None
    usage: Usage


async def complete(
    state: ServerState,
    body: SamplingFields,
    token_ids: list[int],
    request: Request,
    who: Principal,
    chat: bool,
) -> Response:
    metrics = state.metrics
    if body.model != state.model_id:
        raise APIError(
            404,
            f"model {body.model!r} is not served here; try {state.model_id!r}",
            "invalid_request_error",
            "model_not_found",
        )
    try:
        params = _sampling_params(state, body, len(token_ids))
    except APIError:
        metrics.requests_rejected.labels(reason="invalid").inc()
        raise
    key = None
    if state.cache is not None and body.deterministic:
        key = cache_key(
            {
                "permissions": who.permission_key,
                "model": [state.model_id, state.weights_version],
                "template": state.template_version,
                "index": state.index_version(),
                "kind": "chat" if chat else "text",
                "request": body.cache_fields(),
            }
        )
        metrics.response_cache_queries.inc()
        cached: Completion | None = state.cache.get(key)
        if cached is not None:
            metrics.response_cache_hits.inc()
            return _respond_cached(state, body, cached, chat)
    try:
        state.limiter.acquire(who.user, len(token_ids))
    except LimitExceeded as error:
        reason = "per_user_concurrency" if "in flight" in error.message else "per_user_tokens"
        metrics.requests_rejected.labels(reason=reason).inc()
        raise APIError(
            429, error.message, "rate_limit_error", reason, error.retry_after_s
        ) from error
    request_id = new_id("chatcmpl" if chat else "cmpl")
    try:
        stream = state.async_engine.add_request(
            token_ids, params, request_id, who.user, who.tenant, body.priority
        )
    except EngineOverloadedError as error:
        state.limiter.release(who.user, 0)
        metrics.requests_rejected.labels(reason="queue_full").inc()
        raise APIError(
            503, str(error), "server_error", "overloaded", error.retry_after_s
        ) from error
    except EngineError as error:
        state.limiter.release(who.user, 0)
        metrics.requests_rejected.labels(reason="invalid").inc()
        raise APIError(
            error.status_code, str(error), "invalid_request_error", "invalid_request"
        ) from error
    except EngineDeadError as error:
        state.limiter.release(who.user, 0)
        raise APIError(503, str(error), "server_error", "engine_dead") from error

    def finish(output: RequestOutput | None) -> None:
        stream.close()
        state.limiter.release(who.user, len(output.outputs[0].token_ids) if output else 0)
        if output is None or not output.finished:
            metrics.request_success.labels(finished_reason="abort").inc()
        else:
            metrics.observe_finished(output, stream.token_times)
            completion = output.outputs[0]
            if (
                key is not None
                and state.cache is not None
                and completion.finish_reason in ("stop", "length")
            ):
                state.cache.put(
                    key, Completion(completion.text, completion.finish_reason, _usage(output))
                )

    if body.stream:
        return StreamingResponse(
            _sse(state, body, stream, request_id, chat, finish), media_type="text/event-stream"
        )
    output = None
    try:
        output = await _until_done_or_disconnected(stream.final(), request)
    except EngineDeadError as error:
        raise APIError(503, str(error), "server_error", "engine_dead") from error
    finally:
        finish(output)
    if output is None:  # the client left; nobody reads this
        return Response(status_code=499)
    completion = output.outputs[0]
    return _json_response(
        state,
        body,
        request_id,
        chat,
        Completion(completion.text, completion.finish_reason, _usage(output)),
    )


async def _until_done_or_disconnected(
    work: Awaitable[RequestOutput], request: Request
) -> RequestOutput | None:
    """Await work, or return None as soon as the client disconnects (work is cancelled)."""

    async def disconnected() -> None:
        while not await request.is_disconnected():
            await asyncio.sleep(DISCONNECT_POLL_S)

    work_task = asyncio.ensure_future(work)
    watch_task = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({work_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch_task.cancel()
    if work_task in done:
        return work_task.result()
    work_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await work_task
    return None


def _json_response(
    state: ServerState, body: SamplingFields, request_id: str, chat: bool, result: Completion
) -> JSONResponse:
    reason = _finish_reason(result.finish_reason)
    if chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": result.text},
            "finish_reason": reason,
            "logprobs": None,
        }
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": result.text, "finish_reason": reason, "logprobs": None}
        kind = "text_completion"
    return JSONResponse(
        {
            "id": request_id,
            "object": kind,
            "created": now(),
            "model": state.model_id,
            "choices": [choice],
            "usage": result.usage.model_dump(),
        }
    )


def _chunk(
    state: ServerState,
    request_id: str,
    chat: bool,
    text: str | None,
    reason: str | None,
    first: bool = False,
) -> str:
    if chat:
        delta: dict[str, Any] = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": reason, "logprobs": None}
        kind = "text_completion"
    payload = {
        "id": request_id,
        "object": kind,
        "created": now(),
        "model": state.model_id,
        "choices": [choice],
    }
    return f"data: {json.dumps(payload)}\n\n"


def _usage_chunk(state: ServerState, request_id: str, chat: bool, usage: Usage) -> str:
    payload = {
        "id": request_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": now(),
        "model": state.model_id,
        "choices": [],
        "usage": usage.model_dump(),
    }
    return f"data: {json.dumps(payload)}\n\n"


async def _sse(
    state: ServerState,
    body: SamplingFields,
    stream: RequestStream,
    request_id: str,
    chat: bool,
    finish: Callable[[RequestOutput | None], None],
) -> AsyncIterator[str]:
    output = None
    sent = 0
    try:
        if chat:
            yield _chunk(state, request_id, chat, "", None, first=True)
        async for output in stream:
            completion = output.outputs[0]
            piece = completion.text[sent:]
            sent = len(completion.text)
            if piece:
                yield _chunk(state, request_id, chat, piece, None)
            if output.finished:
                yield _chunk(
                    state,
                    request_id,
                    chat,
                    None if chat else "",
                    _finish_reason(completion.finish_reason),
                )
                if body.stream_options and body.stream_options.include_usage:
                    yield _usage_chunk(state, request_id, chat, _usage(output))
        yield "data: [DONE]\n\n"
    except EngineDeadError as error:
        payload = error_body(str(error), "server_error", "engine_dead")
        yield f"data: {json.dumps(payload)}\n\n"
    finally:
        finish(output)


def _respond_cached(
    state: ServerState, body: SamplingFields, cached: Completion, chat: bool
) -> Response:
    request_id = new_id("chatcmpl" if chat else "cmpl")
    if not body.stream:
        return _json_response(state, body, request_id, chat, cached)

    async def replay() -> AsyncIterator[str]:
        if chat:
            yield _chunk(state, request_id, chat, "", None, first=True)
        yield _chunk(state, request_id, chat, cached.text, None)
        yield _chunk(
            state, request_id, chat, None if chat else "", _finish_reason(cached.finish_reason)
        )
        if body.stream_options and body.stream_options.include_usage:
            yield _usage_chunk(state, request_id, chat, cached.usage)
        yield "data: [DONE]\n\n"

    return StreamingResponse(replay(), media_type="text/event-stream")
