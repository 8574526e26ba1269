"""Cited answers over HTTP: POST /v1/answers, and chat completions to the "<model>+rag" model.

The access filter comes from the authenticated key, never from the request body. A follow-up
question carries the conversation's earlier user turns (history); the answer service rewrites it
into a standalone retrieval query and filters by the caller's access on every turn. Assistant
turns are never used for retrieval: they quote evidence the caller may no longer read.

This module holds the routes and the serving (limits, the response cache, the engine); the
request and response bodies are in answer_protocol, as vLLM keeps its protocol apart.
"""

import itertools
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ragserve.access import Principal, access_for
from ragserve.engine.cache_salt import CacheSalt, Narrowing
from ragserve.engine.errors import EngineDeadError, EngineError, InvalidRequestError
from ragserve.engine.outputs import RequestOutput
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.structured import OutputConstraint, checked_grammar
from ragserve.rag.answer import AnswerEvent, AnswerResult, Generate
from ragserve.rag.answer_result import answer_json, citations_json
from ragserve.rag.prompt import TEMPLATE_VERSION, PromptTooLong
from ragserve.server.answer_protocol import AnswerRequest
from ragserve.server.dependencies import principal
from ragserve.server.errors import APIError, from_engine, from_limit, invalid
from ragserve.server.limits import LimitExceeded
from ragserve.server.protocol import error_responses, new_id, now
from ragserve.server.response_cache import cache_key
from ragserve.server.responses import AnswerResponse, json_or_events
from ragserve.server.state import ServerState


def engine_generate(state: ServerState, who: Principal, request_id: str) -> Generate:
    """Generation on the served model for this principal. Its tenant salts the prefix cache, and
    the prompt's narrowing (who may read each source) salts the blocks from the first source on.
    One answer may run several prompts (a reranker's, then the answer's)."""
    counter = itertools.count()

    async def generate(
        token_ids: list[int], params: SamplingParams, narrowing: Narrowing = ()
    ) -> AsyncIterator[RequestOutput]:
        try:
            stream = await state.engine.add_request(
                token_ids,
                params,
                f"{request_id}-{next(counter)}",
                who.account,
                CacheSalt(who.tenant, narrowing),
            )
        except (EngineError, EngineDeadError) as error:
            raise from_engine(error) from error
        output = None
        try:
            async for output in stream:
                yield output
        finally:
            stream.close()
            if output is not None and output.finished:
                state.metrics.observe_finished(output, stream.token_times)

    return generate


async def answer_events(
    state: ServerState,
    who: Principal,
    question: str,
    top_k: int | None,
    kind: str,
    schema: str | None = None,
    style: str | None = None,
    history: Sequence[str] = (),
) -> AsyncIterator[AnswerEvent]:
    """Run the answer path under the caller's limits, with the response cache in front.
    schema: the JSON schema (as JSON text) of a schema answer. style: the answer style (None:
    the server's). history: the conversation's earlier user turns, oldest first."""
    history = list(history)
    if schema is not None:
        # Checked first: a refusal for want of evidence must not hide a bad schema.
        try:
            checked_grammar(OutputConstraint("json", schema))
        except InvalidRequestError as error:
            raise from_engine(error) from error
    key = None
    if state.cache is not None:
        started = time.perf_counter()
        # What the caller may read, not the whole index: a write the caller cannot see must
        # neither drop the caller's entries nor show in whether the next answer is a replay.
        readable = await run_in_threadpool(state.documents.readable_version, who)
        key = cache_key(
            {
                "permissions": who.permission_key,
                "model": [state.model_id, state.weights_version],
                "template": TEMPLATE_VERSION,
                "index": readable,
                "kind": "answer",
                "request": {
                    "question": question,
                    # A follow-up is answered with its conversation: never another's entry.
                    "history": history,
                    "style": style or state.settings.answer_style,
                    "top_k": top_k,
                    "schema": schema,
                },
            }
        )
        state.metrics.response_cache_queries.inc()
        cached: AnswerResult | None = state.cache.get(key)
        if cached is not None:
            state.metrics.response_cache_hits.inc()
            # The replay's own time, not the stored answer's.
            timings = {"total_ms": round((time.perf_counter() - started) * 1000, 1)}
            yield AnswerEvent(cached.answer, replace(cached, timings=timings))
            return
    try:
        prompt_chars = len(question) + sum(len(turn) for turn in history)
        await state.limiter.acquire(who.account, prompt_chars // 4)
    except LimitExceeded as error:
        raise from_limit(error) from error
    completion_tokens = 0
    try:
        generate = engine_generate(state, who, new_id(kind))
        answers = state.rag.answers.answer(
            access_for(who), question, generate, top_k, schema, style=style, history=history
        )
        async for event in answers:
            if event.result is not None:
                completion_tokens = event.result.usage.get("completion_tokens", 0)
                if key is not None and state.cache is not None:
                    state.cache.put(key, event.result)
            yield event
    except PromptTooLong as error:
        param = "response_format" if schema is not None else "messages" if history else "question"
        raise invalid(str(error), "context_length_exceeded", param=param) from error
    finally:
        state.limiter.release(who.account, completion_tokens)


async def _first_event(events: AsyncIterator[AnswerEvent]) -> AnswerEvent:
    """Start the answer before the response goes out, so refusals by limit get their status."""
    return await anext(events)


def answer_routes(state: ServerState) -> APIRouter:
    router = APIRouter(responses=error_responses(400, 401, 429, 503))

    @router.post("/v1/answers", responses=json_or_events(AnswerResponse))
    async def answers(body: AnswerRequest, who: Principal = Depends(principal)) -> Response:
        question, history = body.turn()
        events = answer_events(
            state,
            who,
            question,
            body.top_k,
            "ans",
            body.schema(),
            style=body.answer_style,
            history=history,
        )
        first = await _first_event(events)
        if not body.stream:
            result = first.result
            async for event in events:
                result = event.result or result
            assert result is not None
            return JSONResponse(answer_json(result))

        async def sse() -> AsyncIterator[str]:
            try:
                for event in _chain(first, events):
                    async for item in event:
                        # The checked text as one token event, then the answer with its
                        # citations (a draft is never streamed before its check).
                        if item.text:
                            token = {"type": "token", "text": item.text}
                            yield f"data: {json.dumps(token)}\n\n"
                        if item.result is not None:
                            payload = {"type": "answer", **answer_json(item.result)}
                            yield f"data: {json.dumps(payload)}\n\n"
                yield "data: [DONE]\n\n"
            except APIError as error:
                yield f"data: {json.dumps({'type': 'error', 'message': error.message})}\n\n"
            finally:
                await events.aclose()

        return StreamingResponse(sse(), media_type="text/event-stream")

    return router


def _chain(
    first: AnswerEvent, rest: AsyncIterator[AnswerEvent]
) -> list[AsyncIterator[AnswerEvent]]:
    async def one() -> AsyncIterator[AnswerEvent]:
        yield first

    return [one(), rest]


async def rag_chat_completion(
    state: ServerState,
    who: Principal,
    question: str,
    stream: bool,
    schema: str | None = None,
    style: str | None = None,
    history: Sequence[str] = (),
) -> Response:
    """A chat completion whose content is a cited answer; citations ride in an extra field.
    With a schema (response_format) the content is the JSON answer, and a refusal is the
    message's refusal, as OpenAI's structured outputs give it. history: the earlier user
    messages, oldest first."""
    events = answer_events(state, who, question, None, "chatcmpl", schema, style, history)
    first = await _first_event(events)
    request_id = new_id("chatcmpl")
    model = state.rag_model_id

    def chunk(delta: dict[str, Any], finish: str | None, extra: dict | None = None) -> str:
        payload = {
            "id": request_id,
            "object": "chat.completion.chunk",
            "created": now(),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(payload | (extra or {}))}\n\n"

    if not stream:
        result = first.result
        async for event in events:
            result = event.result or result
        assert result is not None
        return JSONResponse(
            {
                "id": request_id,
                "object": "chat.completion",
                "created": now(),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "logprobs": None,
                        "message": {"role": "assistant", **_content(result, schema)},
                    }
                ],
                "usage": result.usage
                or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                "citations": citations_json(result.citations),
                "field_citations": result.field_citations,
                "mode": result.mode,
                "refused": result.refused,
            }
        )

    async def sse() -> AsyncIterator[str]:
        try:
            yield chunk({"role": "assistant", "content": ""}, None)
            for source in _chain(first, events):
                async for event in source:
                    if event.result is None:
                        continue
                    # The checked answer, not the raw tokens: unsupported markers are gone.
                    yield chunk(_content(event.result, schema), None)
                    yield chunk(
                        {},
                        "stop",
                        {
                            "citations": citations_json(event.result.citations),
                            "mode": event.result.mode,
                            "refused": event.result.refused,
                        },
                    )
            yield "data: [DONE]\n\n"
        finally:
            await events.aclose()

    return StreamingResponse(sse(), media_type="text/event-stream")


def _content(result: AnswerResult, schema: str | None) -> dict[str, str | None]:
    if schema is not None and result.refused:
        return {"content": None, "refusal": result.answer}
    return {"content": result.answer}
