"""Chat completions to the "<model>+rag" model: the last user message answered by the answer
path (answers.py), the answer as the message's content and its citations in extra fields; with a
schema (response_format) the content is the JSON answer and a refusal is the message's refusal,
as OpenAI's structured outputs give it."""

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ragserve.access import Principal
from ragserve.rag.answer import AnswerResult
from ragserve.rag.answer_result import citations_json
from ragserve.server.answer_protocol import ANSWER_STYLES, MAX_HISTORY
from ragserve.server.answers import answer_events, final, started
from ragserve.server.completion_reply import Choice, Completion, Reply
from ragserve.server.errors import invalid
from ragserve.server.protocol import ChatCompletionRequest, Usage, new_id
from ragserve.server.state import ServerState


@dataclass(frozen=True)
class RagChat:
    """A chat request to the +rag model, read as a question for the answer path."""

    question: str
    history: list[str]
    style: str | None
    schema: str | None

    @classmethod
    def of(cls, body: ChatCompletionRequest, model_id: str) -> "RagChat":
        """The last user message as the question, the earlier user messages as its history
        (assistant turns quote evidence the caller may no longer read, so they take no part
        in retrieval); a 400 for what a cited answer cannot be."""
        questions = [m.text() for m in body.messages if m.role == "user"]
        if not questions or not questions[-1].strip():
            raise invalid("a RAG chat needs a user message", "invalid_messages")
        style = (body.model_extra or {}).get("answer_style")
        if style is not None and style not in ANSWER_STYLES:
            message = f"answer_style must be one of {', '.join(ANSWER_STYLES)}, not {style!r}"
            raise invalid(message, "invalid_parameter", param="answer_style")
        if body.n != 1:
            message = "the +rag model gives one cited answer: n must be 1"
            raise invalid(message, "invalid_parameter", param="n")
        if body.tools:
            message = f"the +rag model does not call tools; use {model_id!r}"
            raise invalid(message, "invalid_parameter", param="tools")
        constraint = body.output_constraint()
        if constraint is not None and constraint.kind != "json":
            message = (
                "the +rag model answers in text or JSON (response_format) with citations; "
                f"for regex, choice or grammar output use {model_id!r}"
            )
            raise invalid(message, "invalid_parameter", param="structured_outputs")
        history = [q for q in questions[:-1] if q.strip()][-MAX_HISTORY:]
        schema = None if constraint is None else constraint.spec
        return cls(questions[-1], history, style, schema)


async def rag_chat_completion(
    state: ServerState, who: Principal, body: ChatCompletionRequest, request: Request
) -> Response:
    """A chat completion whose content is a cited answer; citations ride in extra fields.
    With a schema (response_format) the content is the JSON answer, and a refusal is the
    message's refusal, as OpenAI's structured outputs give it."""
    chat = RagChat.of(body, state.model_id)
    answer_id = new_id("chatcmpl")
    events = await started(
        answer_events(
            state,
            who,
            chat.question,
            None,
            answer_id,
            chat.schema,
            chat.style,
            chat.history,
            request.scope,
        )
    )
    reply = Reply(state.rag_model_id, body, answer_id, chat=True, echo=None)
    if not body.stream:
        result = await final(events)
        fields = _rag_fields(result) | {"field_citations": result.field_citations}
        return JSONResponse(reply.json(_completion(result, chat.schema)) | fields)

    async def sse() -> AsyncIterator[str]:
        try:
            for opening in reply.openings(1):
                yield opening
            async for event in events:
                if event.result is None:
                    continue
                # The checked answer, not the raw tokens: unsupported markers are gone.
                content = _content(event.result, chat.schema)
                yield reply.event([reply.delta(0, content, None)])
                yield reply.event([reply.delta(0, {}, "stop")], extra=_rag_fields(event.result))
            yield "data: [DONE]\n\n"
        finally:
            await events.aclose()

    return StreamingResponse(sse(), media_type="text/event-stream")


def _completion(result: AnswerResult, schema: str | None) -> Completion:
    """An answer as a chat completion's one choice; a refused schema answer is a refusal."""
    usage = Usage.model_validate(result.usage or {"prompt_tokens": 0, "total_tokens": 0})
    if schema is not None and result.refused:
        return Completion([Choice("", "stop", refusal=result.answer)], usage)
    return Completion([Choice(result.answer, "stop")], usage)


def _rag_fields(result: AnswerResult) -> dict[str, Any]:
    return {
        "citations": citations_json(result.citations),
        "mode": result.mode,
        "refused": result.refused,
    }


def _content(result: AnswerResult, schema: str | None) -> dict[str, str | None]:
    if schema is not None and result.refused:
        return {"content": None, "refusal": result.answer}
    return {"content": result.answer}
