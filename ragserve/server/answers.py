"""Cited answers over HTTP: POST /v1/answers, and the answer path it shares with chat
completions to the "<model>+rag" model (rag_chat.py).

The access filter comes from the authenticated key, never from the request body. A follow-up
question carries the conversation's earlier user turns (history); the answer service rewrites it
into a standalone retrieval query and filters by the caller's access on every turn. Assistant
turns are never used for retrieval: they quote evidence the caller may no longer read.

This module holds the routes and the serving (limits, the response cache, the engine); the
request and response bodies are in answer_protocol, as vLLM keeps its protocol apart.
"""

import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, MutableMapping, Sequence
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ragserve.access import Principal, access_for
from ragserve.engine.cache_salt import Narrowing
from ragserve.engine.client import Generate, OutputStream, generator
from ragserve.engine.errors import EngineDeadError, EngineError, InvalidRequestError
from ragserve.engine.outputs import RequestOutput
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.structured import OutputConstraint, checked_grammar
from ragserve.rag.answer import AnswerEvent, AnswerResult
from ragserve.rag.answer_result import answer_json
from ragserve.rag.prompt import TEMPLATE_VERSION, PromptTooLong
from ragserve.server.answer_protocol import AnswerRequest
from ragserve.server.cache_and_limits import acquire, cache_lookup, cache_store, release
from ragserve.server.dependencies import principal, server_state
from ragserve.server.errors import APIError, from_engine, invalid
from ragserve.server.history import remember
from ragserve.server.protocol import error_responses, new_id
from ragserve.server.responses import AnswerResponse, json_or_events
from ragserve.server.state import ServerState
from ragserve.server.tracing import RequestTrace, answer_attributes


def engine_generate(
    state: ServerState, who: Principal, request_id: str, trace: RequestTrace | None = None
) -> Generate:
    """Generation on the served model for this principal (engine.client.generator), its
    finished requests counted in the metrics (and kept for the request's trace) and the
    engine's refusals as HTTP errors. One answer may run several prompts (a reranker's, then
    the answer's)."""

    def finished(output: RequestOutput, stream: OutputStream) -> None:
        state.metrics.observe_finished(output, stream.token_times)
        if trace is not None:
            trace.engine_outputs.append(output)

    generate = generator(state.engine, who.account, who.tenant, request_id, finished)

    async def refusing_as_http(
        token_ids: list[int], params: SamplingParams, narrowing: Narrowing = ()
    ) -> AsyncIterator[RequestOutput]:
        try:
            async for output in generate(token_ids, params, narrowing):
                yield output
        except (EngineError, EngineDeadError) as error:
            raise from_engine(error) from error

    return refusing_as_http


async def answer_events(
    state: ServerState,
    who: Principal,
    question: str,
    top_k: int | None,
    answer_id: str,
    schema: str | None = None,
    style: str | None = None,
    history: Sequence[str] = (),
    scope: MutableMapping[str, Any] | None = None,
) -> AsyncIterator[AnswerEvent]:
    """Run the answer path under the caller's limits, with the response cache in front; the
    answer, known by answer_id, goes into the query history. schema: the JSON schema (as JSON
    text) of a schema answer. style: the answer style (None: the server's). history: the
    conversation's earlier user turns, oldest first. scope: the HTTP request's, whose trace
    this answer records (when tracing is on)."""
    scope = scope or {}
    arrived, trace = state.tracing.begin(scope)
    result, error = None, None
    try:
        async for event in _answer_events(
            state, who, question, top_k, answer_id, schema, style, list(history), trace
        ):
            result = event.result or result
            yield event
    except APIError as refused:
        error = refused.message
        raise
    finally:
        if result is not None and error is None:
            remember(state, who, answer_id, question, history, result, arrived)
        if trace is not None:
            attributes = answer_attributes(who, state.model_id, result)
            name = f"{scope.get('method', 'POST')} {scope.get('path', '')}"
            state.tracing.record(name, arrived, trace, attributes, error)


async def _answer_events(
    state: ServerState,
    who: Principal,
    question: str,
    top_k: int | None,
    answer_id: str,
    schema: str | None,
    style: str | None,
    history: list[str],
    trace: RequestTrace | None,
) -> AsyncIterator[AnswerEvent]:
    if schema is not None:
        # Checked first: a refusal for want of evidence must not hide a bad schema.
        try:
            checked_grammar(OutputConstraint("json", schema))
        except InvalidRequestError as error:
            raise from_engine(error) from error
    started = time.perf_counter()
    request = {
        "question": question,
        # A follow-up is answered with its conversation: never another's entry.
        "history": history,
        "style": style or state.settings.answer_style,
        "top_k": top_k,
        "schema": schema,
    }
    with trace.step("permission_filter") if trace is not None else contextlib.nullcontext():
        access = access_for(who)
        key, cached = await _cached_answer(state, who, request)
    if cached is not None:
        # The replay's own time, not the stored answer's.
        timings = {"total_ms": round((time.perf_counter() - started) * 1000, 1)}
        yield AnswerEvent(cached.answer, replace(cached, timings=timings, steps=[]))
        return
    await acquire(state, who, (len(question) + sum(len(turn) for turn in history)) // 4)
    completion_tokens = 0
    try:
        generate = engine_generate(state, who, answer_id, trace)
        answers = state.rag.answers.answer(
            access, question, generate, top_k, schema, style=style, history=history
        )
        async for event in answers:
            if event.result is not None:
                completion_tokens = event.result.usage.get("completion_tokens", 0)
                cache_store(state, key, event.result)
                if trace is not None:
                    trace.add_steps(event.result.steps)
            yield event
    except PromptTooLong as error:
        param = "response_format" if schema is not None else "messages" if history else "question"
        raise invalid(str(error), "context_length_exceeded", param=param) from error
    finally:
        release(state, who, completion_tokens)


async def _cached_answer(
    state: ServerState, who: Principal, request: dict[str, Any]
) -> tuple[str | None, AnswerResult | None]:
    """The answer's cache key and stored answer (see cache_lookup)."""
    if state.cache is None:
        return None, None
    # What the caller may read, not the whole index: a write the caller cannot see must
    # neither drop the caller's entries nor show in whether the next answer is a replay.
    readable = await run_in_threadpool(state.documents.readable_version, who)
    parts = {
        "permissions": who.permission_key,
        "model": [state.model_id, state.weights_version],
        "template": TEMPLATE_VERSION,
        "index": readable,
        "kind": "answer",
        "request": request,
    }
    return cache_lookup(state, parts)


async def started(events: AsyncIterator[AnswerEvent]) -> AsyncGenerator[AnswerEvent, None]:
    """The events, with the first already awaited: the answer starts before the response goes
    out, so a refusal by limit or a bad request gets its own status."""
    first = await anext(events)

    async def chained() -> AsyncGenerator[AnswerEvent, None]:
        try:
            yield first
            async for event in events:
                yield event
        finally:
            await events.aclose()

    return chained()


async def final(events: AsyncIterator[AnswerEvent]) -> AnswerResult:
    result = None
    async for event in events:
        result = event.result or result
    assert result is not None
    return result


router = APIRouter(responses=error_responses(400, 401, 429, 503))


@router.post("/v1/answers", responses=json_or_events(AnswerResponse))
async def answers(
    body: AnswerRequest,
    request: Request,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> Response:
    question, history = body.turn()
    schema, style, answer_id = body.schema(), body.answer_style, new_id("ans")
    events = await started(
        answer_events(
            state, who, question, body.top_k, answer_id, schema, style, history, request.scope
        )
    )
    if not body.stream:
        return JSONResponse({"id": answer_id, **answer_json(await final(events))})
    return StreamingResponse(_answer_sse(events, answer_id), media_type="text/event-stream")


async def _answer_sse(
    events: AsyncGenerator[AnswerEvent, None], answer_id: str
) -> AsyncIterator[str]:
    """The checked text as one token event, then the answer with its id and citations (a
    draft is never streamed before its check)."""
    try:
        async for item in events:
            if item.text:
                yield f"data: {json.dumps({'type': 'token', 'text': item.text})}\n\n"
            if item.result is not None:
                answer = {"type": "answer", "id": answer_id, **answer_json(item.result)}
                yield f"data: {json.dumps(answer)}\n\n"
        yield "data: [DONE]\n\n"
    except APIError as error:
        yield f"data: {json.dumps({'type': 'error', 'message': error.message})}\n\n"
    finally:
        await events.aclose()
