"""ragserve's settings, for the server, the CLI, evaluation and benchmarks alike: defaults, then
a TOML file (--config), then RAGSERVE_* environment variables, then command-line flags, each
overriding the one before.

A setting that a component also has (the engine's limits, retrieval, evidence and answer
settings) takes its default from that component's settings class, so each default is written
once; engine_config() and the other *_settings() methods hand the values back.
"""

from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from ragserve.engine.config import EngineConfig
from ragserve.rag.answer import AnswerSettings
from ragserve.rag.answerability import Answerability
from ragserve.rag.documents import DEFAULT_VERSIONS_KEPT
from ragserve.rag.embeddings import DEFAULT_EMBEDDING_MODEL, DEFAULT_READER_MODEL
from ragserve.rag.evidence import EvidenceSettings
from ragserve.rag.retrieval import RetrievalSettings


def defaults(settings_class: type) -> dict[str, Any]:
    return {f.name: f.default for f in fields(settings_class)}


ENGINE = defaults(EngineConfig)
# The engine settings a deployment sets; the rest keep EngineConfig's defaults.
ENGINE_FIELDS = (
    "model",
    "dtype",
    "quantization",
    "kv_cache_dtype",
    "kv_cache_memory_bytes",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_queued_requests",
    "max_queued_tokens",
    "enable_prefix_caching",
    "speculative_tokens",
    "speculative_max_batch",
    "speculative_min_acceptance",
    "batch_invariant",
    "num_threads",
)
RETRIEVAL = defaults(RetrievalSettings)
EVIDENCE = defaults(EvidenceSettings)
ANSWER = defaults(AnswerSettings)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAGSERVE_", extra="forbid")

    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = Path("data")
    model: str = ENGINE["model"]
    # More models served beside `model` by the completion routes, each on an engine of its own
    # with the same engine settings (names as for `model`); answers use `model`.
    also_serve: list[str] = Field(default_factory=list)
    # "auto": bfloat16 where the CPU computes it natively, else float32.
    dtype: str = ENGINE["dtype"]
    # "int8": projections' weights in int8 with a scale per row (faster decoding, see
    # docs/benchmarks.md for what it costs in quality); "none": in dtype.
    quantization: str = ENGINE["quantization"]
    # "int8": the KV cache rounded per position with a scale each (about twice the tokens in
    # kv_cache_memory_bytes, faster decoding of many or long sequences); "auto": in dtype.
    kv_cache_dtype: str = ENGINE["kv_cache_dtype"]
    # Engine limits (see EngineConfig).
    kv_cache_memory_bytes: int = Field(ENGINE["kv_cache_memory_bytes"], ge=1)
    max_model_len: int | None = ENGINE["max_model_len"]
    max_num_seqs: int = Field(ENGINE["max_num_seqs"], ge=1)
    max_num_batched_tokens: int = Field(ENGINE["max_num_batched_tokens"], ge=1)
    max_queued_requests: int = Field(ENGINE["max_queued_requests"], ge=1)
    max_queued_tokens: int = Field(ENGINE["max_queued_tokens"], ge=1)
    # Reuse the KV blocks of earlier prompts' shared prefixes (within a tenant).
    enable_prefix_caching: bool = ENGINE["enable_prefix_caching"]
    # Draft tokens per step for greedy requests by prompt lookup (0: off); the most decoding
    # sequences at which every one gets drafts, and past that the accepted share a sequence's
    # drafts need to go on (see EngineConfig).
    speculative_tokens: int = Field(ENGINE["speculative_tokens"], ge=0, le=16)
    speculative_max_batch: int = Field(ENGINE["speculative_max_batch"], ge=0)
    speculative_min_acceptance: float = Field(ENGINE["speculative_min_acceptance"], ge=0, le=1)
    # Every request in the batch-invariant mode: greedy output independent of batch, chunking
    # and prefix cache (answers always are; see the README).
    batch_invariant: bool = ENGINE["batch_invariant"]
    # CPU threads of each engine; default: every core, or, for replicas on Ray Serve, the
    # cluster's CPUs shared out evenly between them.
    num_threads: int | None = Field(ENGINE["num_threads"], ge=1)
    # Request limits.
    max_tokens_cap: int = Field(2048, ge=1)
    default_max_tokens: int = Field(256, ge=1)
    max_concurrent_requests_per_user: int = Field(16, ge=1)
    tokens_per_minute_per_user: int = Field(200_000, ge=1)
    # The largest request body an API route takes (413 past it, read no further); uploads to
    # POST /v1/documents have their own, max_upload_bytes plus 64 KiB for the form or the JSON
    # around the text. The body is read in pieces, after the key is checked.
    max_request_bytes: int = Field(4 << 20, ge=1024)
    # Invalid API keys one client address may send in a minute before all its keyed requests
    # get a 429 until the window clears (behind a proxy, every client shares its address).
    auth_failures_per_minute: int = Field(20, ge=1)
    # OpenAI-compatible bodies ignore fields they do not know (and name them in the
    # x-ragserve-ignored-fields header), as vLLM does; true refuses them with a 400 instead.
    strict_request_fields: bool = False
    # Documents and retrieval. store: a path or sqlite:///path, or postgresql://...;
    # default data_dir/index.sqlite.
    store: str | None = None
    # Earlier versions kept of each document when it is replaced (GET
    # /v1/documents/{id}/versions, restore); 0: none.
    document_versions_kept: int = Field(DEFAULT_VERSIONS_KEPT, ge=0, le=1000)
    # A name the package registry knows (all-minilm-l6-v2) or a sentence-transformers folder.
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    # The embedding model that reads the question against each retrieved sentence (evidence
    # ranking and answerability): a larger one than retrieval's, since it reads tens of
    # sentences, not the whole index. The packaged answerability model was fitted with it.
    reader_model: str = DEFAULT_READER_MODEL
    # What documents embed in when ingested (queries always in float32): "auto" is bfloat16
    # where the CPU computes it natively, else float32 (see Embedder).
    embedding_ingest_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    chunk_size: int = Field(128, ge=8)
    chunk_overlap: int = Field(16, ge=0)
    retrieval_top_k: int = Field(RETRIEVAL["top_k"], ge=1, le=100)
    retrieval_candidates: int = Field(RETRIEVAL["candidates"], ge=1, le=1000)
    max_upload_bytes: int = Field(20 << 20, ge=1)
    # Answers: the prompt carries the best evidence_sentences of the retrieved chunks; the
    # answerability model (a file as `ragserve eval calibrate` writes; default: the one in the
    # package) decides refusals and the extractive fallback; citations are kept at or above
    # support_threshold; retrieved text is spotlighted (datamark). reranker: none, "llm" (the
    # served model judges each chunk), or a sentence-transformers CrossEncoder folder.
    evidence_sentences: int = Field(EVIDENCE["sentences"], ge=1, le=20)
    answerability_file: Path | None = None
    # "quote": the evidence that states the answer quoted, without a model call; "generate":
    # the model answers from the evidence (checked; the quote as fallback when
    # extractive_fallback); "auto": a quote when one sentence states the answer, the model
    # when several must be combined. A request may name its own (answer_style). With the
    # default 135M model quoting is measured more often right and faster (docs/evaluation.md);
    # a stronger model may earn "generate".
    answer_style: Literal["quote", "generate", "auto"] = ANSWER["style"]
    extractive_fallback: bool = ANSWER["extractive_fallback"]
    support_threshold: float = Field(ANSWER["support_threshold"], ge=0, le=1)
    answer_max_tokens: int = Field(ANSWER["max_tokens"], ge=1)
    # Output tokens of an answer held to a client's JSON schema (response_format).
    structured_answer_max_tokens: int = Field(ANSWER["structured_max_tokens"], ge=1)
    evidence_budget_tokens: int = Field(256, ge=64)
    datamark: bool = True
    reranker: str | None = None
    # Documents one POST /v1/rerank or /v1/score may send (the LLM reranker runs a prompt each).
    max_rerank_documents: int = Field(64, ge=1, le=1000)
    # Folders an administrator may make a source of over HTTP (POST /v1/sources) lie under
    # this one; none: sources are added from the command line only (`ragserve sync add`).
    source_folders_root: Path | None = None
    # Hosts whose websites an administrator may make a source of over HTTP; none: websites
    # are added from the command line only (the server would otherwise fetch any address it
    # can reach, its own network's included, for whoever administers a tenant).
    source_url_hosts: list[str] = Field(default_factory=list)
    # How often the server looks for sources whose sync interval (--every) has passed.
    source_check_interval_s: float = Field(30, gt=0)
    # The query history (answers with their feedback, for the tenant's administrators): kept
    # this many days (0: nothing is recorded); askers as a keyed hash unless
    # history_identities.
    history_retention_days: float = Field(30, ge=0)
    history_identities: bool = False
    # OTLP/HTTP endpoint (e.g. http://collector:4318/v1/traces) that receives one trace per
    # request; none: no tracing at all.
    otlp_traces_endpoint: str | None = None
    # Scale-out on Ray Serve (`pip install ragserve[ray]`), used when replicas > 1 or a
    # ray_address is set (otherwise one process, no Ray): engine replicas behind api_replicas
    # API replicas, on the Ray cluster at ray_address (none: a local one). routing "prefix"
    # sends a prompt to the replica that took its longest known prefix unless that one has
    # routing_balance_tolerance more requests in flight than the least loaded;
    # "power_of_two" is Ray Serve's default.
    replicas: int = Field(1, ge=1)
    api_replicas: int = Field(1, ge=1)
    ray_address: str | None = None
    routing: Literal["prefix", "power_of_two"] = "prefix"
    routing_balance_tolerance: int = Field(4, ge=0)
    # Response cache (off by default).
    response_cache: bool = False
    response_cache_ttl_s: float = Field(300.0, gt=0)
    response_cache_max_entries: int = Field(10_000, ge=1)

    @model_validator(mode="after")
    def _answerability_reads_the_reader(self) -> "Settings":
        """Refuse an answerability model fitted on another reader model's similarities."""
        if self.answerability_file is not None and not self.answerability_file.is_file():
            raise ValueError(f"answerability_file {self.answerability_file} does not exist")
        Answerability.load(self.answerability_file).check_reader(self.reader_model)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    @classmethod
    def load(cls, config_file: Path | None = None, **overrides: Any) -> "Settings":
        """Settings from the TOML file and environment, with explicit overrides on top."""
        if config_file is not None and not config_file.is_file():
            raise FileNotFoundError(f"config file {config_file} does not exist")

        class FromFile(cls):  # type: ignore[valid-type, misc]
            model_config = SettingsConfigDict(
                env_prefix="RAGSERVE_", extra="forbid", toml_file=config_file
            )

        return FromFile(**{k: v for k, v in overrides.items() if v is not None})

    @property
    def embedding_model_id(self) -> str:
        return Path(self.embedding_model).name

    @property
    def store_url(self) -> str:
        return self.store or str(self.data_dir / "index.sqlite")

    # The data folder's other databases, each used by the server and the CLI alike.
    @property
    def keys_path(self) -> Path:
        return self.data_dir / "keys.sqlite"

    @property
    def sources_path(self) -> Path:
        return self.data_dir / "sources.sqlite"

    @property
    def history_path(self) -> Path:
        return self.data_dir / "history.sqlite"

    def engine_config(self) -> EngineConfig:
        return EngineConfig(**{name: getattr(self, name) for name in ENGINE_FIELDS})

    def retrieval_settings(self) -> RetrievalSettings:
        return RetrievalSettings(self.retrieval_top_k, self.retrieval_candidates)

    def evidence_settings(self) -> EvidenceSettings:
        return EvidenceSettings(sentences=self.evidence_sentences)

    @property
    def answer_output_reserve(self) -> int:
        """Tokens an answer prompt leaves for the reply, text or schema answer."""
        return max(self.answer_max_tokens, self.structured_answer_max_tokens)

    def answer_settings(self) -> AnswerSettings:
        return AnswerSettings(
            top_k=self.retrieval_top_k,
            support_threshold=self.support_threshold,
            max_tokens=self.answer_max_tokens,
            structured_max_tokens=self.structured_answer_max_tokens,
            extractive_fallback=self.extractive_fallback,
            style=self.answer_style,
        )
