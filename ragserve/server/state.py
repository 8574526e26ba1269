"""What the routes share: the engine, keys, limits, metrics, caches and the RAG services."""

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ragserve.engine.client import EngineClient
from ragserve.history import QueryHistory
from ragserve.keys import KeyStore
from ragserve.rag.rerank import Reranker
from ragserve.server.errors import APIError
from ragserve.server.limits import AuthThrottle, DemandLimiter
from ragserve.server.metrics import ServerMetrics
from ragserve.server.response_cache import ResponseCache
from ragserve.server.tracing import Tracing
from ragserve.services import RagServices
from ragserve.serving.documents import DocumentService
from ragserve.serving.sources import SourceService
from ragserve.settings import Settings


def weights_version(model_path: Path) -> str:
    """Identifies the weights without reading them all: names, sizes and the first MiB."""
    digest = hashlib.sha256()
    for path in sorted(model_path.glob("*.safetensors")):
        digest.update(f"{path.name}:{path.stat().st_size}".encode())
        with path.open("rb") as f:
            digest.update(f.read(1 << 20))
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class ServedModel:
    """A model the completion routes serve: its engine, and what keys its cached responses."""

    id: str
    engine: EngineClient
    weights_version: str
    template_version: str

    @classmethod
    def of(cls, engine: EngineClient, model_id: str) -> "ServedModel":
        template = engine.tokenizer.chat_template or ""
        return cls(
            model_id,
            engine,
            weights_version(engine.model_path),
            hashlib.sha256(template.encode()).hexdigest()[:16],
        )


@dataclass
class ServerState:
    settings: Settings
    engine: EngineClient
    keys: KeyStore
    limiter: DemandLimiter
    auth_throttle: AuthThrottle
    metrics: ServerMetrics
    cache: ResponseCache | None
    model_id: str
    weights_version: str
    template_version: str
    rag: RagServices
    # What /v1/rerank and /v1/score serve, by model id: the served model as a judge, and the
    # CrossEncoder folder when the reranker setting names one.
    rerankers: dict[str, Reranker] = field(default_factory=dict)
    # Folders the index follows (the CLI's `ragserve sync` and /v1/sources).
    sources: SourceService | None = None
    # Answers given and their feedback (None: not kept).
    history: QueryHistory | None = None
    # One trace per request, exported when otlp_traces_endpoint is set.
    tracing: Tracing = field(default_factory=lambda: Tracing(None))
    # Models served beside `model_id` (setting also_serve), by id; the RAG path uses model_id's.
    also_served: dict[str, ServedModel] = field(default_factory=dict)
    # Unknown request field names already logged (each is logged once).
    logged_ignored_fields: set[str] = field(default_factory=set)

    def served(self, model_id: str) -> ServedModel:
        """The served model of that id, or a 404 naming the ones served."""
        if model_id == self.model_id:
            return ServedModel(
                self.model_id, self.engine, self.weights_version, self.template_version
            )
        if model_id in self.also_served:
            return self.also_served[model_id]
        names = ", ".join(repr(name) for name in [self.model_id, *self.also_served])
        raise APIError(
            404,
            f"model {model_id!r} is not served here; try {names}",
            "invalid_request_error",
            "model_not_found",
        )

    @property
    def engines(self) -> list[EngineClient]:
        """Every engine the server runs: the default model's, then the others'."""
        return [self.engine, *(served.engine for served in self.also_served.values())]

    @property
    def documents(self) -> DocumentService:
        return DocumentService(self.rag.index)

    @property
    def rag_model_id(self) -> str:
        """Chat completions to this model answer from the caller's documents."""
        return self.model_id + "+rag"
