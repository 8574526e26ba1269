"""The success bodies the API returns, as OpenAPI documents them. Routes build these bodies
themselves (streams and cached replays share the wire format), so the models describe rather
than filter: extra fields are allowed, and the schema fuzzer checks every body against them."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ragserve.rag.citations import Citation
from ragserve.server.protocol import Usage


class Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class AssistantMessage(Body):
    role: Literal["assistant"]
    # None when the reply is tool calls, or a refusal of a +rag schema answer.
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    refusal: str | None = None


class TopLogprob(Body):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(Body):
    content: list[TokenLogprob] | None
    refusal: list[TokenLogprob] | None = None


class ChatChoice(Body):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChatLogprobs | None = None
    # ragserve's: present (true) when the output was closed to fit max_tokens.
    closed_early: bool = False


class ChatCompletionResponse(Body):
    """A chat completion; the "+rag" model adds citations, mode and refused."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class TextLogprobs(Body):
    """Per token; the echoed prompt's first token has null log-probabilities."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class TextChoice(Body):
    index: int
    text: str
    finish_reason: str | None
    logprobs: TextLogprobs | None = None
    # ragserve's: present (true) when the output was closed to fit max_tokens.
    closed_early: bool = False


class CompletionResponse(Body):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[TextChoice]
    usage: Usage


class TokenizeResponse(Body):
    count: int
    max_model_len: int
    tokens: list[int]
    # Each token as the tokenizer spells it, when return_token_strs asks.
    token_strs: list[str] | None = None


class DetokenizeResponse(Body):
    prompt: str


class RerankResult(Body):
    index: int
    relevance_score: float
    # With return_documents.
    document: dict[str, str] | None = None


class RerankResponse(Body):
    """Best first, at most top_n."""

    id: str
    model: str
    usage: dict[str, int]
    results: list[RerankResult]


class Score(Body):
    index: int
    object: Literal["score"]
    score: float


class ScoreResponse(Body):
    id: str
    object: Literal["list"]
    created: int
    model: str
    data: list[Score]
    usage: dict[str, int]


class Embedding(Body):
    object: Literal["embedding"]
    index: int
    # Floats, or base64 of little-endian float32 with encoding_format "base64".
    embedding: list[float] | str


class EmbeddingUsage(Body):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(Body):
    object: Literal["list"]
    model: str
    data: list[Embedding]
    usage: EmbeddingUsage


class ModelCard(Body):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    max_model_len: int | None = None


class ModelList(Body):
    object: Literal["list"]
    data: list[ModelCard]


class Health(Body):
    status: str


class AnswerRefusal(Body):
    """Why an answer was refused: "no_match", no permitted passage matched the question;
    "not_stated", passages matched but none states the answer (related: the closest, cited)."""

    reason: Literal["no_match", "not_stated"] | None
    related: list[Citation] = []


class AnswerResponse(Body):
    # What POST /v1/answers/{id}/feedback rates.
    id: str
    answer: str
    mode: Literal["generated", "extractive", "refused"]
    refused: bool
    answerability: float | None
    citations: list[Citation]
    # Set when refused.
    refusal: AnswerRefusal | None = None
    # The standalone query retrieval ran on (a follow-up rewritten with its conversation).
    query: str = ""
    # A schema answer (response_format): the JSON value, and its values' sources by pointer.
    value: Any = None
    field_citations: dict[str, list[int]] = {}
    usage: dict[str, Any]
    timings: dict[str, float]


class Document(Body):
    id: str
    object: Literal["document"]
    title: str
    source: str
    owner: str
    version: int
    acl: dict[str, Any]
    # The caller's own level on the document: read, write or manage.
    permission: str | None
    num_chunks: int
    text_length: int
    content_hash: str
    ingested_at: float
    # When its source last changed it (synced documents), else null.
    source_modified_at: float | None


class StoredOutOfSight(Body):
    """After an upload that was stored, then hidden from the caller by another's change."""

    id: str
    object: Literal["document"]
    version: int
    permission: None


class AclChanged(Body):
    """After an ACL change that leaves the caller without access: only the new ACL."""

    id: str
    object: Literal["document"]
    acl: dict[str, Any]
    permission: None


class DocumentList(Body):
    object: Literal["list"]
    data: list[Document]
    first_id: str | None
    last_id: str | None
    has_more: bool


class Deleted(Body):
    id: str
    object: Literal["document"]
    deleted: bool


class Chunk(Body):
    chunk_id: str
    doc_id: str
    title: str
    source: str
    start: int
    end: int
    text: str
    score: float
    version: int


class SearchResults(Body):
    object: Literal["list"]
    data: list[Chunk]


def json_or_events(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """A 200 that is the model as JSON, or server-sent events when the request streams."""
    return {200: {"model": model, "content": {"text/event-stream": {}}}}


def json_body(model: type[BaseModel] | Any) -> dict[int | str, dict[str, Any]]:
    return {200: {"model": model}}


class AuditRecord(Body):
    at: float
    tenant: str
    actor: str
    action: str
    target: str
    version: int | None
    detail: dict[str, Any]


class AuditLog(Body):
    object: Literal["list"]
    data: list[AuditRecord]


class Identity(Body):
    """Who a key belongs to; the page shows it and hides what the role may not do."""

    user: str
    groups: list[str]
    tenant: str
    role: Literal["reader", "writer", "admin"]


class Percentiles(Body):
    p50: float | None
    p90: float | None
    p99: float | None


class RecentRequests(Body):
    window_s: float
    finished: int
    output_tokens_per_s: float
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    e2e_ms: Percentiles


class ReplicaLoad(Body):
    running: int
    waiting: int
    kv_cache_usage: float


class ServerStatus(Body):
    """The engine's state now (summed over replicas, and each replica's load) and the latencies
    of the requests finished lately."""

    model: str
    running: int
    waiting: int
    kv_cache_usage: float
    kv_blocks_total: int
    kv_blocks_free: int
    prefix_cache_hit_rate: float | None
    preemptions: int
    recent: RecentRequests
    replicas: dict[str, ReplicaLoad]


class DocumentVersion(Body):
    version: int
    current: bool
    title: str
    source: str
    content_hash: str
    num_chunks: int
    text_length: int
    # When this version was written.
    ingested_at: float
    # The ACL the version had; shown to those who may manage the document.
    acl: dict[str, Any] | None


class DocumentVersionList(Body):
    object: Literal["list"]
    id: str
    data: list[DocumentVersion]
