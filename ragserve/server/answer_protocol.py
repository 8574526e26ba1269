"""The /v1/answers request and response bodies, apart from the routes that serve them.

As in vLLM, the protocol (what a body may hold and what a reply looks like) is kept apart from
the serving (limits, the response cache, the engine) and the routes. A request is either one
question or a conversation (messages) whose last message is the user's question; the caps on
messages and their length are checked here, before any work. Only user turns are read as
history: system and assistant turns never take part in retrieval. ragserve's own API refuses
unknown fields outright.
"""

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragserve.server.constraints import ResponseFormat
from ragserve.server.errors import invalid

MAX_QUESTION_CHARS = 4000
MAX_MESSAGES = 64
# The earlier user turns a follow-up is read with: the most recent ones.
MAX_HISTORY = 8

# "quote": the best evidence quoted, no model call; "generate": the model answers from the
# evidence, checked; "auto": the service decides per question. None: the server's setting.
AnswerStyleName = Literal["quote", "generate", "auto"]
ANSWER_STYLES: tuple[str, ...] = get_args(AnswerStyleName)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class AnswerMessage(BaseModel):
    """One turn of a conversation, in OpenAI's chat shape."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    @field_validator("content")
    @classmethod
    def not_too_long(cls, content: str | list[TextPart]) -> str | list[TextPart]:
        size = len(content) if isinstance(content, str) else sum(len(p.text) for p in content)
        if size > MAX_QUESTION_CHARS:
            raise ValueError(
                f"a message holds at most {MAX_QUESTION_CHARS} characters, this one {size}"
            )
        return content


class AnswerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Exactly one of question (one question) and messages (a conversation, the last message
    # the user's question).
    question: str | None = Field(None, min_length=1, max_length=MAX_QUESTION_CHARS)
    messages: list[AnswerMessage] | None = Field(None, max_length=MAX_MESSAGES)
    answer_style: AnswerStyleName | None = None
    top_k: int | None = Field(None, ge=1, le=20)
    stream: bool = False
    # json_object or json_schema: the answer is JSON (value), each value checked on its own.
    response_format: ResponseFormat | None = None

    def schema(self) -> str | None:
        constraint = self.response_format.constraint() if self.response_format else None
        return None if constraint is None else constraint.spec

    def turn(self) -> tuple[str, list[str]]:
        """The question and the earlier user turns (oldest first), or a 400 saying what is
        wrong with the body."""
        if self.question is not None and self.messages is not None:
            raise invalid(
                "give either question or messages, not both", "invalid_request", param="messages"
            )
        if self.question is not None:
            return self.question, []
        if not self.messages:
            raise invalid(
                "give question (a string) or messages (a conversation whose last message is "
                "the user's question)",
                "invalid_request",
                param="question" if self.messages is None else "messages",
            )
        return question_of(self.messages)


def question_of(messages: list[AnswerMessage]) -> tuple[str, list[str]]:
    """The last message's text, which must be the user's, and the earlier user messages' texts
    (the most recent MAX_HISTORY, oldest first; empty ones dropped). System and assistant
    messages do not take part in retrieval."""
    last = messages[-1]
    if last.role != "user":
        raise invalid(
            f"the last message must be the user's question (role user), not role {last.role}",
            "invalid_messages",
            param="messages",
        )
    question = last.text()
    if not question.strip():
        raise invalid(
            "the last message (the user's question) has no text",
            "invalid_messages",
            param="messages",
        )
    earlier = [m.text() for m in messages[:-1] if m.role == "user" and m.text().strip()]
    return question, earlier[-MAX_HISTORY:]
