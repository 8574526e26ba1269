"""OpenAI-compatible request and response bodies.

Like vLLM, the OpenAI-compatible bodies accept fields they do not know and ignore them: clients
(guidellm, LangChain, LlamaIndex) send extensions of their own, and refusing them breaks those
clients for nothing. unknown_fields() names what was ignored, so the server can say so (or, with
strict_request_fields, refuse). A known field with a wrong type, or a value that would change
the meaning of the request that ragserve cannot honour, is refused with a 400 naming it.
ragserve's own API (answers, documents) refuses unknown fields outright.
"""

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from ragserve.engine.sampling_params import MAX_CHOICES, MAX_LOGIT_BIAS, MAX_LOGPROBS, MAX_PENALTY
from ragserve.engine.structured import OutputConstraint
from ragserve.server.constraints import (
    NamedToolChoice,
    ResponseFormat,
    StructuredOutputs,
    Tool,
    ToolCallIn,
)
from ragserve.server.lenient import Lenient, refuse_if


class StreamOptions(Lenient):
    include_usage: bool = False
    # vLLM's extension: usage (so far) on every chunk, not only in a last one.
    continuous_usage_stats: bool = False


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
    structured_outputs: StructuredOutputs | None = None
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
        # best_of > n would generate more candidates than it returns; ragserve does not rank.
        refuse_if(
            self.best_of is not None and self.best_of != self.n,
            f"best_of must equal n ({self.n}) if given: ranking candidates is unsupported",
        )
        return self

    @model_validator(mode="after")
    def one_constraint(self) -> "SamplingFields":
        refuse_if(
            self.structured_outputs is not None
            and self.response_format is not None
            and self.response_format.type != "text",
            "give response_format or structured_outputs, not both",
        )
        return self

    def output_constraint(self) -> OutputConstraint | None:
        """What the output must match, if anything."""
        if self.structured_outputs is not None:
            return self.structured_outputs.constraint()
        return self.response_format.constraint() if self.response_format else None

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

    @property
    def output_logprobs(self) -> int | None:
        """How many alternatives each output token's log-probabilities list, or None."""
        return None

    @property
    def prompt_logprobs(self) -> int | None:
        """The same for the prompt's tokens (an echoed text completion's)."""
        return None

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
    role: Literal["system", "user", "assistant", "developer", "tool"]
    # None only for an assistant message that called tools.
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def has_content(self) -> "ChatMessage":
        refuse_if(
            self.content is None and not (self.role == "assistant" and self.tool_calls),
            f"a {self.role} message needs content",
        )
        return self

    def text(self) -> str:
        """The content as text; an assistant's tool calls as the JSON the model writes."""
        if self.tool_calls:
            calls = [
                {"name": c.function.name, "arguments": json.loads(c.function.arguments or "{}")}
                for c in self.tool_calls
            ]
            return json.dumps(calls[0] if len(calls) == 1 else calls)
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content or [])


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None

    @model_validator(mode="after")
    def top_logprobs_needs_logprobs(self) -> "ChatCompletionRequest":
        refuse_if(
            bool(self.top_logprobs) and not self.logprobs,
            "top_logprobs needs logprobs set to true",
        )
        return self

    @property
    def output_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @field_validator("tools")
    @classmethod
    def distinct_names(cls, tools: list[Tool] | None) -> list[Tool] | None:
        names = [tool.function.name for tool in tools or []]
        refuse_if(len(set(names)) != len(names), "tools must have distinct names")
        return tools

    @field_validator("tool_choice")
    @classmethod
    def tool_choice_offered(
        cls, choice: str | NamedToolChoice | None, info: ValidationInfo
    ) -> str | NamedToolChoice | None:
        names = [tool.function.name for tool in info.data.get("tools") or []]
        refuse_if(
            choice not in (None, "none", "auto") and not names,
            "tool_choice asks for a tool call but no tools are given",
        )
        refuse_if(
            isinstance(choice, NamedToolChoice) and choice.function.name not in names,
            f"tool_choice names a function that is not in tools: {names}",
        )
        return choice

    @model_validator(mode="after")
    def tools_or_format(self) -> "ChatCompletionRequest":
        uses_tools = bool(self.tools) and self.tool_choice != "none"
        refuse_if(
            uses_tools and self.output_constraint() is not None,
            "give tools or a response_format/structured_outputs, not both",
        )
        return self

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    # The prompt is sent back before each choice's text (and its tokens' log-probabilities
    # before the output's, with logprobs: what lm-evaluation-harness's loglikelihood reads).
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    suffix: str | None = None

    @property
    def output_logprobs(self) -> int | None:
        return self.logprobs

    @property
    def prompt_logprobs(self) -> int | None:
        return self.logprobs if self.echo else None

    @field_validator("suffix")
    @classmethod
    def no_suffix(cls, value: str | None) -> str | None:
        refuse_if(bool(value), "suffix (insertion) is not supported")
        return value

    @field_validator("prompt")
    @classmethod
    def one_prompt(cls, value: str | list[int] | list[str] | list[list[int]]) -> str | list[int]:
        if isinstance(value, list) and value and isinstance(value[0], str | list):
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
    413: "The body is larger than its cap: max_request_bytes, or for an upload max_upload_bytes "
    "(the file, or the text in UTF-8) plus 64 KiB for the form.",
    429: "A per-user limit, or too many invalid keys from this client; Retry-After says when.",
    503: "The queue is full (Retry-After) or the engine stopped.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation of the refusals an operation may return."""
    return {
        status: {"model": ErrorResponse, "description": ERROR_STATUSES[status]}
        for status in statuses
    }
