"""OpenAI-compatible request and response bodies.

Like vLLM, the OpenAI-compatible bodies accept fields they do not know and ignore them: clients
(guidellm, LangChain, LlamaIndex) send extensions of their own, and refusing them breaks those
clients for nothing. unknown_fields() names what was ignored, so the server can say so (or, with
strict_request_fields, refuse). A known field with a wrong type, or a value that would change
the meaning of the request that ragserve cannot honour, is refused with a 400 naming it.
ragserve's own API (answers, documents) refuses unknown fields outright.
"""

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ragserve.engine.sampling_params import MAX_CHOICES, MAX_LOGIT_BIAS, MAX_PENALTY


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


def unknown_fields(body: BaseModel, prefix: str = "") -> list[str]:
    """Dotted names of the fields the body carried but does not define, nested ones included
    (a field of list items is named once: messages.name). A name can be any JSON string, and
    the names go into a response header (latin-1, one line): each is escaped to printable ASCII
    as ascii() escapes it."""
    found = [prefix + ascii(name)[1:-1] for name in body.model_extra or {}]
    for name in type(body).model_fields:
        value = getattr(body, name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, BaseModel):
                found.extend(unknown_fields(item, f"{prefix}{name}."))
    return list(dict.fromkeys(found))


class StreamOptions(Lenient):
    include_usage: bool = False
    # vLLM's extension: usage (so far) on every chunk, not only in a last one.
    continuous_usage_stats: bool = False


class ResponseFormat(Lenient):
    type: str

    @field_validator("type")
    @classmethod
    def text_only(cls, value: str) -> str:
        if value != "text":
            raise ValueError(f"{value!r} is not supported yet: only 'text' (no structured output)")
        return value


def refuse_if(condition: bool, message: str) -> None:
    if condition:
        raise ValueError(message)


NO_LOGPROBS = "log-probabilities are not returned by this server"


class SamplingFields(Lenient):
    """What chat and text completions share: OpenAI's fields and vLLM's sampling extensions."""

    model: str
    max_tokens: int | None = Field(None, ge=1)
    min_tokens: int = Field(0, ge=0)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = -1
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    # Greedy output independent of batch, chunking and prefix cache (the engine's
    # batch-invariant mode); the "+rag" model and /v1/answers always use it.
    batch_invariant: bool = False
    skip_special_tokens: bool = True
    repetition_penalty: float = Field(1.0, gt=0)
    presence_penalty: float = Field(0.0, ge=-MAX_PENALTY, le=MAX_PENALTY)
    frequency_penalty: float = Field(0.0, ge=-MAX_PENALTY, le=MAX_PENALTY)
    # Token id (as a string, as JSON object keys are) -> bias in [-100, 100].
    logit_bias: dict[int, float] | None = None
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    best_of: int | None = None
    use_beam_search: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    user: str | None = None
    priority: int = 0

    @field_validator("logit_bias")
    @classmethod
    def bias_in_range(cls, value: dict[int, float] | None) -> dict[int, float] | None:
        for token, bias in (value or {}).items():
            if not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:
                raise ValueError(f"bias for token {token} must be in [-100, 100], got {bias}")
        return value

    @field_validator("use_beam_search")
    @classmethod
    def no_beam_search(cls, value: bool) -> bool:
        refuse_if(value, "beam search is not supported")
        return value

    @model_validator(mode="after")
    def best_of_is_n(self) -> "SamplingFields":
        # best_of > n ranks candidates by log-probability, which ragserve does not compute.
        refuse_if(
            self.best_of is not None and self.best_of != self.n,
            f"best_of must equal n ({self.n}) if given: ranking candidates is unsupported",
        )
        return self

    @property
    def deterministic(self) -> bool:
        return self.temperature == 0 or self.seed is not None

    @property
    def continuous_usage(self) -> bool:
        options = self.stream_options
        return options is not None and options.include_usage and options.continuous_usage_stats

    @property
    def final_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def cache_fields(self) -> dict[str, Any]:
        """The request as it bears on the answer (the wire format of the reply and ignored
        fields excluded)."""
        wire = {"stream", "stream_options", "user"}
        dumped = self.model_dump(exclude=wire)
        return {k: v for k, v in dumped.items() if k in type(self).model_fields}


class ContentPart(Lenient):
    type: Literal["text"]
    text: str


class ChatMessage(Lenient):
    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[ContentPart]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None

    @field_validator("logprobs", "top_logprobs")
    @classmethod
    def no_logprobs(cls, value: bool | int | None) -> bool | int | None:
        refuse_if(bool(value), NO_LOGPROBS)
        return value

    @field_validator("tools")
    @classmethod
    def no_tools(cls, value: list[Any] | None) -> list[Any] | None:
        refuse_if(bool(value), "tool calls are not supported yet")
        return value

    @field_validator("tool_choice")
    @classmethod
    def no_tool_choice(cls, value: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        refuse_if(value not in (None, "none", "auto"), "tool calls are not supported yet")
        return value

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str]
    # The prompt is sent back before each choice's text.
    echo: bool = False
    logprobs: int | None = None
    suffix: str | None = None

    @field_validator("logprobs")
    @classmethod
    def no_logprobs(cls, value: int | None) -> int | None:
        refuse_if(value is not None, NO_LOGPROBS)
        return value

    @field_validator("suffix")
    @classmethod
    def no_suffix(cls, value: str | None) -> str | None:
        refuse_if(bool(value), "suffix (insertion) is not supported")
        return value

    @field_validator("prompt")
    @classmethod
    def one_prompt(cls, value: str | list[int] | list[str]) -> str | list[int]:
        if isinstance(value, list) and value and isinstance(value[0], str):
            if len(value) != 1:
                raise ValueError("one prompt per request: send a string or a list of token ids")
            return value[0]
        return value

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_tokens


class EmbeddingRequest(Lenient):
    model: str
    # Text, texts, or token ids in the embedding model's own vocabulary (one list or several).
    input: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """Every refusal's body, as OpenAI shapes it."""

    error: ErrorDetail


ERROR_STATUSES = {
    400: "The request is invalid as sent (the message and `param` say what).",
    401: "No API key, or an invalid or revoked one.",
    403: "The key may not do this (role or document permission).",
    404: "No such model or document (or not one the key may see).",
    409: "The document was deleted, or the key lost its permission on it, while the upload was "
    "being processed; nothing was stored.",
    413: "The upload is larger than max_upload_bytes.",
    429: "A per-user limit, or too many invalid keys from this client; Retry-After says when.",
    503: "The queue is full (Retry-After) or the engine stopped.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation of the refusals an operation may return."""
    return {
        status: {"model": ErrorResponse, "description": ERROR_STATUSES[status]}
        for status in statuses
    }
