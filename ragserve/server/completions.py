"""The OpenAI completion endpoints on the served model: /v1/chat/completions and
/v1/completions (chat to the "+rag" model goes to the answer path).

Request path: validate -> model and sampling parameters -> [response cache] -> per-user limits
-> engine -> stream or collect. A request with n > 1 runs its choices as sequences of one
engine request; the later ones reuse the prompt's KV blocks through the prefix cache.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from transformers import PreTrainedTokenizerBase

from ragserve.access import Principal
from ragserve.engine.client import OutputStream, final_output
from ragserve.engine.errors import EngineDeadError, EngineError
from ragserve.engine.outputs import RequestOutput
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.structured import OutputConstraint
from ragserve.server.cache_and_limits import acquire, cache_lookup, cache_store, release
from ragserve.server.completion_reply import Reply, completion_of, usage_of
from ragserve.server.dependencies import principal, server_state
from ragserve.server.errors import from_engine, invalid
from ragserve.server.lenient import unknown_fields
from ragserve.server.logprobs import LogprobFormat
from ragserve.server.protocol import (
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    SamplingFields,
    error_responses,
    new_id,
)
from ragserve.server.rag_chat import rag_chat_completion
from ragserve.server.responses import ChatCompletionResponse, CompletionResponse, json_or_events
from ragserve.server.state import ServedModel, ServerState
from ragserve.server.tool_calls import ToolUse

logger = logging.getLogger(__name__)

DISCONNECT_POLL_S = 0.1
IGNORED_FIELDS_HEADER = "x-ragserve-ignored-fields"
RAG_EXTENSIONS = frozenset({"answer_style"})


def ignored_fields(
    state: ServerState, body: BaseModel, known: frozenset[str] = frozenset()
) -> list[str]:
    """The body's unknown fields, which are ignored (logged once per name), or a 400 when the
    server is set to strict_request_fields. known: extensions this request reads itself."""
    names = [name for name in unknown_fields(body) if name not in known]
    if names and state.settings.strict_request_fields:
        raise invalid(
            f"unknown field(s): {', '.join(names)} (this server sets strict_request_fields)",
            "unknown_field",
            param=names[0],
        )
    for name in names:
        if name not in state.logged_ignored_fields:
            state.logged_ignored_fields.add(name)
            logger.info("ignoring the unknown request field %r (logged once)", name)
    return names


def tell_ignored(response: Response, names: list[str]) -> Response:
    if names:
        response.headers[IGNORED_FIELDS_HEADER] = ", ".join(names)
    return response


router = APIRouter(responses=error_responses(400, 401, 404, 429, 503))


@router.post("/v1/chat/completions", responses=json_or_events(ChatCompletionResponse))
async def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> Response:
    if body.model == state.rag_model_id:
        # answer_style, an extension of the +rag model: quote, generate or auto.
        ignored = ignored_fields(state, body, RAG_EXTENSIONS)
        response = await rag_chat_completion(state, who, body, request)
        return tell_ignored(response, ignored)
    ignored = ignored_fields(state, body)
    tools = ToolUse.of(body.tools, body.tool_choice)
    tokenizer = state.served(body.model).engine.tokenizer
    token_ids = chat_token_ids(tokenizer, body.messages, tools)
    response = await complete(state, body, token_ids, request, who, echo=None, tools=tools)
    return tell_ignored(response, ignored)


def chat_token_ids(
    tokenizer: PreTrainedTokenizerBase,
    messages: list[ChatMessage],
    tools: ToolUse | None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """The conversation through the model's chat template (tools described in its system
    message), as token ids; a 400 when the template refuses the conversation's shape."""
    turns = [{"role": m.role, "content": m.text()} for m in messages]
    if tools is not None:
        turns = tools.messages(turns)
    try:
        prompt = tokenizer.apply_chat_template(
            turns, tokenize=False, add_generation_prompt=add_generation_prompt
        )
    except Exception as error:  # a template may refuse a conversation shape
        raise invalid(f"cannot apply the chat template: {error}", "invalid_messages") from error
    return tokenizer.encode(prompt, add_special_tokens=False)


@router.post("/v1/completions", responses=json_or_events(CompletionResponse))
async def completions(
    body: CompletionRequest,
    request: Request,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> Response:
    ignored = ignored_fields(state, body)
    engine = state.served(body.model).engine
    tokenizer = engine.tokenizer
    if isinstance(body.prompt, str):
        token_ids = tokenizer.encode(body.prompt, add_special_tokens=False)
    else:
        token_ids = list(body.prompt)
    echo = None
    if body.echo:
        if not isinstance(body.prompt, str):
            try:  # ids outside the vocabulary cannot be decoded
                engine.check_token_ids(token_ids)
            except EngineError as error:
                raise from_engine(error) from error
        echo = body.prompt if isinstance(body.prompt, str) else tokenizer.decode(token_ids)
    response = await complete(state, body, token_ids, request, who, echo)
    return tell_ignored(response, ignored)


def sampling_params(
    state: ServerState,
    served: ServedModel,
    body: SamplingFields,
    prompt_len: int,
    constraint: OutputConstraint | None = None,
) -> SamplingParams:
    settings = state.settings
    requested = body.requested_max_tokens  # type: ignore[attr-defined]
    if requested is not None and requested > settings.max_tokens_cap:
        raise invalid(
            f"max_tokens is {requested}; this server allows at most {settings.max_tokens_cap}",
            "max_tokens_too_large",
            param="max_tokens",
        )
    room = served.engine.max_model_len - prompt_len
    if room < 1:
        raise invalid(
            f"the prompt has {prompt_len} tokens; this model's context is "
            f"{served.engine.max_model_len} tokens (max_model_len)",
            "context_length_exceeded",
        )
    max_tokens = requested if requested is not None else min(settings.default_max_tokens, room)
    try:
        return SamplingParams(
            n=body.n,
            max_tokens=max_tokens,
            min_tokens=body.min_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            seed=body.seed,
            repetition_penalty=body.repetition_penalty,
            presence_penalty=body.presence_penalty,
            frequency_penalty=body.frequency_penalty,
            logit_bias=body.logit_bias,
            stop=body.stop,
            stop_token_ids=body.stop_token_ids,
            include_stop_str_in_output=body.include_stop_str_in_output,
            ignore_eos=body.ignore_eos,
            batch_invariant=body.batch_invariant,
            skip_special_tokens=body.skip_special_tokens,
            logprobs=body.output_logprobs,
            prompt_logprobs=body.prompt_logprobs,
            constraint=constraint,
        )
    except EngineError as error:
        raise invalid(str(error), "invalid_parameter") from error


async def complete(
    state: ServerState,
    body: SamplingFields,
    token_ids: list[int],
    request: Request,
    who: Principal,
    echo: str | None,
    tools: ToolUse | None = None,
) -> Response:
    """Run one completion request; echo is the prompt text to send back first, if asked;
    tools, how a chat may call functions."""
    chat = isinstance(body, ChatCompletionRequest)
    served = state.served(body.model)
    constraint = tools.constraint() if tools is not None else body.output_constraint()
    params = sampling_params(state, served, body, len(token_ids), constraint)
    top = body.output_logprobs
    logprob_format = LogprobFormat(served.engine.tokenizer, top) if top is not None else None
    reply = Reply(
        served.id, body, new_id("chatcmpl" if chat else "cmpl"), chat, echo, tools, logprob_format
    )
    key, cached = None, None
    if body.deterministic:
        parts = {
            "permissions": who.permission_key,
            "model": [served.id, served.weights_version],
            "template": served.template_version,
            "kind": "chat" if chat else "text",
            "request": body.cache_fields(),
        }
        key, cached = cache_lookup(state, parts)
    if cached is not None:
        traced(state, request.scope, who, served.id, None, 0.0)
        if body.stream:
            return StreamingResponse(reply.replay(cached), media_type="text/event-stream")
        return JSONResponse(reply.json(cached))
    await acquire(state, who, len(token_ids))
    generating = time.perf_counter()
    try:
        stream = await served.engine.add_request(
            token_ids, params, reply.request_id, who.account, who.tenant, body.priority
        )
    except (EngineError, EngineDeadError) as error:
        release(state, who, 0)
        raise from_engine(error) from error
    finish = _finisher(state, who, stream, key, reply)
    finish = traced(state, request.scope, who, served.id, finish, generating) or finish
    if body.stream:
        return StreamingResponse(reply.stream(stream, finish), media_type="text/event-stream")
    output = None
    try:
        output = await until_done_or_disconnected(final_output(stream), request)
    except EngineDeadError as error:
        raise from_engine(error) from error
    finally:
        finish(output)
    if output is None:  # the client left; nobody reads this
        return Response(status_code=499)
    return JSONResponse(reply.json(completion_of(output, tools, reply.logprobs)))


Finish = Callable[[RequestOutput | None], None]


def traced(
    state: ServerState,
    scope: MutableMapping[str, Any],
    who: Principal,
    model: str,
    finish: Finish | None,
    generating: float,
) -> Finish | None:
    """finish, also recording the request's trace when tracing is on (its generate step from
    `generating`, a perf_counter reading); with no finish (a cached reply), the trace is
    recorded at once."""
    arrived, trace = state.tracing.begin(scope)
    if trace is None:
        return finish
    name = f"{scope.get('method', 'POST')} {scope.get('path', '')}"
    attributes = {"ragserve.tenant": who.tenant, "gen_ai.request.model": model}
    if finish is None:
        state.tracing.record(name, arrived, trace, attributes | {"ragserve.cached": True})
        return None
    untraced = finish

    def traced_finish(output: RequestOutput | None) -> None:
        untraced(output)
        trace.steps.append(("generate", generating, time.perf_counter()))
        trace.engine_outputs += [output] if output is not None else []
        error = None if output is not None and output.finished else "abandoned"
        state.tracing.record(name, arrived, trace, attributes, error)

    return traced_finish


def _finisher(
    state: ServerState,
    who: Principal,
    stream: OutputStream,
    key: str | None,
    reply: Reply,
) -> Callable[[RequestOutput | None], None]:
    """What ends a request, finished or not: the stream closed, the caller's limits released,
    the metrics counted, and a complete response cached."""

    def finish(output: RequestOutput | None) -> None:
        stream.close()
        release(state, who, usage_of(output).completion_tokens if output else 0)
        if output is None or not output.finished:
            state.metrics.request_success.labels(finished_reason="abort").inc()
            return
        state.metrics.observe_finished(output, stream.token_times)
        if {c.finish_reason for c in output.outputs} <= {"stop", "length"}:
            cache_store(state, key, completion_of(output, reply.tools, reply.logprobs))

    return finish


async def until_done_or_disconnected(
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
