"""The wire format of a completion: the JSON body, or the server-sent events of a stream (one
per choice and step; usage on every event when continuous_usage_stats asks), and the replay of
a cached completion as events."""

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ragserve.engine.client import OutputStream
from ragserve.engine.errors import EngineDeadError
from ragserve.engine.outputs import CompletionOutput, RequestOutput
from ragserve.server.errors import error_body
from ragserve.server.logprobs import LogprobFormat, merged
from ragserve.server.protocol import (
    PromptTokensDetails,
    SamplingFields,
    Usage,
    now,
)
from ragserve.server.tool_calls import CallStream, ToolCall, ToolUse


@dataclass
class Choice:
    text: str
    finish_reason: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    # A chat message that declines (OpenAI's structured outputs): no content, this text instead.
    refusal: str | None = None
    # The choice's logprobs object as sent, when the request asked for log-probabilities.
    logprobs: dict[str, Any] | None = None
    # Closed with its grammar's shortest ending to fit max_tokens (engine/ending.py).
    closed_early: bool = False


@dataclass
class Completion:
    """What a response is made of; also what the response cache stores."""

    choices: list[Choice]
    usage: Usage


def usage_of(output: RequestOutput) -> Usage:
    prompt = len(output.prompt_token_ids)
    completion = sum(len(choice.token_ids) for choice in output.outputs)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=output.num_cached_tokens),
    )


LogprobsOf = Callable[[RequestOutput, CompletionOutput], dict[str, Any] | None]


def completion_of(
    output: RequestOutput, tools: ToolUse | None = None, logprobs_of: LogprobsOf | None = None
) -> Completion:
    """The response's content; with tools, a reply that calls them as its tool calls."""
    choices = []
    for c in output.outputs:
        calls = tools.calls(c.text) if tools is not None and c.finish_reason == "stop" else []
        called = Choice("", "tool_calls", calls) if calls else None
        choice = called or Choice(c.text, c.finish_reason)
        choice.logprobs = logprobs_of(output, c) if logprobs_of is not None else None
        choice.closed_early = c.closed_early
        choices.append(choice)
    return Completion(choices, usage_of(output))


def wire_finish_reason(reason: str | None) -> str | None:
    return {"stop": "stop", "length": "length", "abort": "abort"}.get(reason or "", reason)


def marked(choice: dict[str, Any], closed_early: bool) -> dict[str, Any]:
    """A finished choice as sent: ragserve's `closed_early: true` on one that was (not in
    OpenAI's shape, left out otherwise), as vLLM adds its `stop_reason`."""
    return choice | {"closed_early": True} if closed_early else choice


class Reply:
    """The wire format of one request's response: a JSON body, or server-sent events."""

    def __init__(
        self,
        model: str,
        body: SamplingFields,
        request_id: str,
        chat: bool,
        echo: str | None,
        tools: ToolUse | None = None,
        logprob_format: LogprobFormat | None = None,
    ) -> None:
        self.model = model
        self.body = body
        self.request_id = request_id
        self.chat = chat
        self.echo = echo or ""
        self.kind = "chat.completion" if chat else "text_completion"
        self.tools = tools
        self.logprob_format = logprob_format

    def logprobs(
        self, output: RequestOutput, choice: CompletionOutput, first_token: int = 0
    ) -> dict[str, Any] | None:
        """The choice's logprobs object for its tokens from first_token on (a stream sends
        each token's once); a text completion's echoed prompt comes first with the first."""
        found = choice.logprobs
        if self.logprob_format is None or found is None:
            return None
        tokens = choice.token_ids[first_token : len(found)]
        positions = found[first_token:]
        if self.chat:
            return {"content": self.logprob_format.chat(tokens, positions), "refusal": None}
        earlier = choice.token_ids[:first_token]
        offset = len(self.echo) + sum(len(self.logprob_format.token(t)) for t in earlier)
        result = self.logprob_format.completion(tokens, list(positions), offset)
        if self.echo and first_token == 0 and output.prompt_logprobs is not None:
            prompt = self.logprob_format.completion(
                output.prompt_token_ids, output.prompt_logprobs, 0
            )
            result = merged(prompt, result)
        return result

    def json(self, result: Completion) -> dict[str, Any]:
        choices = []
        for index, choice in enumerate(result.choices):
            reason = wire_finish_reason(choice.finish_reason)
            if self.chat:
                message: dict[str, Any] = {"role": "assistant", "content": choice.text}
                if choice.refusal is not None:
                    message = {"role": "assistant", "content": None, "refusal": choice.refusal}
                if choice.tool_calls:
                    message = {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [call.wire() for call in choice.tool_calls],
                    }
                wired = {
                    "index": index,
                    "message": message,
                    "finish_reason": reason,
                    "logprobs": choice.logprobs,
                }
            else:
                text = self.echo + choice.text
                wired = {
                    "index": index,
                    "text": text,
                    "finish_reason": reason,
                    "logprobs": choice.logprobs,
                }
            choices.append(marked(wired, choice.closed_early))
        return {
            "id": self.request_id,
            "object": self.kind,
            "created": now(),
            "model": self.model,
            "choices": choices,
            "usage": result.usage.model_dump(),
        }

    def event(
        self,
        choices: list[dict[str, Any]],
        usage: Usage | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """One server-sent event; extra: fields beside the standard ones (the +rag model's
        citations)."""
        payload: dict[str, Any] = {
            "id": self.request_id,
            "object": self.kind + ".chunk" if self.chat else self.kind,
            "created": now(),
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            payload["usage"] = usage.model_dump()
        return f"data: {json.dumps(payload | (extra or {}))}\n\n"

    def _choice(
        self,
        index: int,
        text: str | None,
        reason: str | None,
        role: bool = False,
        logprobs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if not self.chat:
            return {
                "index": index,
                "text": text or "",
                "finish_reason": reason,
                "logprobs": logprobs,
            }
        delta: dict[str, Any] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        return {"index": index, "delta": delta, "finish_reason": reason, "logprobs": logprobs}

    def delta(
        self,
        index: int,
        delta: dict[str, Any],
        reason: str | None,
        logprobs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return {"index": index, "delta": delta, "finish_reason": reason, "logprobs": logprobs}

    def openings(self, n: int) -> list[str]:
        """What precedes the generated text of each choice: the role, or the echoed prompt
        (which, when log-probabilities are asked for, comes with the first tokens instead:
        the prompt's are known only once it has been computed)."""
        if self.chat:
            return [self.event([self._choice(i, "", None, role=True)]) for i in range(n)]
        if self.echo and self.logprob_format is None:
            return [self.event([self._choice(i, self.echo, None)]) for i in range(n)]
        return []

    async def stream(
        self, stream: OutputStream, finish: Callable[[RequestOutput | None], None]
    ) -> AsyncIterator[str]:
        output = None
        sent = [0] * self.body.n
        sent_tokens = [0] * self.body.n
        ended = [False] * self.body.n
        # A text completion echoing its prompt with logprobs sends the prompt with the first.
        echo_pending = [bool(self.echo) and self.logprob_format is not None] * self.body.n
        calls = [CallStream(self.tools) for _ in range(self.body.n)] if self.tools else []
        try:
            for event in self.openings(self.body.n):
                yield event
            async for output in stream:
                usage = usage_of(output) if self.body.continuous_usage else None
                for choice in output.outputs:
                    piece = choice.text[sent[choice.index] :]
                    sent[choice.index] = len(choice.text)
                    before = sent_tokens[choice.index]
                    sent_tokens[choice.index] = len(choice.logprobs or [])
                    # Every new token's log-probabilities go out now, even when the text of
                    # the token is held back (a possible stop string): nothing is sent twice.
                    new = sent_tokens[choice.index] > before
                    logprobs = self.logprobs(output, choice, before) if new else None
                    if echo_pending[choice.index] and not self.chat:
                        piece = self.echo + piece
                        echo_pending[choice.index] = False
                    done = choice.finish_reason is not None and not ended[choice.index]
                    ended[choice.index] = choice.finish_reason is not None
                    if calls:
                        reason = wire_finish_reason(choice.finish_reason) if done else None
                        for delta, finish in calls[choice.index].feed(piece, reason):
                            wired = self.delta(choice.index, delta, finish, logprobs)
                            yield self.event([marked(wired, done and choice.closed_early)], usage)
                            logprobs = None
                    elif piece or done or logprobs is not None:
                        wired = self._choice(
                            choice.index,
                            piece if piece or not self.chat else None,
                            wire_finish_reason(choice.finish_reason),
                            logprobs=logprobs,
                        )
                        yield self.event([marked(wired, done and choice.closed_early)], usage)
                if output.finished and self.body.final_usage:
                    yield self.event([], usage_of(output))
            yield "data: [DONE]\n\n"
        except EngineDeadError as error:
            payload = error_body(str(error), "server_error", "engine_dead")
            yield f"data: {json.dumps(payload)}\n\n"
        finally:
            finish(output)

    async def replay(self, cached: Completion) -> AsyncIterator[str]:
        """A cached completion as the events its original stream had (in one piece each)."""
        for event in self.openings(len(cached.choices)):
            yield event
        usage = cached.usage if self.body.continuous_usage else None
        for index, choice in enumerate(cached.choices):
            reason = wire_finish_reason(choice.finish_reason)
            if choice.tool_calls:
                wire = [{"index": i, **call.wire()} for i, call in enumerate(choice.tool_calls)]
                delta = self.delta(index, {"tool_calls": wire}, reason, choice.logprobs)
                yield self.event([marked(delta, choice.closed_early)], usage)
            else:
                text = choice.text
                if self.echo and self.logprob_format is not None and not self.chat:
                    text = self.echo + text
                wired = self._choice(index, text, reason, logprobs=choice.logprobs)
                yield self.event([marked(wired, choice.closed_early)], usage)
        if self.body.final_usage:
            yield self.event([], cached.usage)
        yield "data: [DONE]\n\n"
