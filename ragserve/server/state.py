"""What the routes share: the engine, keys, limits, metrics, caches and the RAG services."""

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ragserve.engine.engine import LLMEngine
from ragserve.rag.answer import AnswerService, AnswerSettings
from ragserve.rag.answerability import Answerability
from ragserve.rag.documents import AccessFilter
from ragserve.rag.embeddings import Embedder
from ragserve.rag.evidence import EvidenceSelector, EvidenceSettings
from ragserve.rag.ingest import Ingestor
from ragserve.rag.prompt import PromptBuilder
from ragserve.rag.rerank import CrossEncoderReranker, LLMReranker, Reranker
from ragserve.rag.retrieval import RetrievalSettings, Retriever
from ragserve.rag.store import Store, open_store
from ragserve.server.async_engine import AsyncEngine
from ragserve.server.auth import KeyStore, Principal, Role
from ragserve.server.limits import UserLimiter
from ragserve.server.metrics import ServerMetrics
from ragserve.server.response_cache import ResponseCache
from ragserve.server.settings import ServerSettings


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str,
        code: str,
        retry_after_s: float | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.param = param
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.retry_after_s = retry_after_s


def weights_version(model_path: Path) -> str:
    """Identifies the weights without reading them all: names, sizes and the first MiB."""
    digest = hashlib.sha256()
    for path in sorted(model_path.glob("*.safetensors")):
        digest.update(f"{path.name}:{path.stat().st_size}".encode())
        with path.open("rb") as f:
            digest.update(f.read(1 << 20))
    return digest.hexdigest()[:16]


@dataclass
class ServerState:
    settings: ServerSettings
    engine: LLMEngine
    async_engine: AsyncEngine
    keys: KeyStore
    limiter: UserLimiter
    metrics: ServerMetrics
    cache: ResponseCache | None
    model_id: str
    weights_version: str
    template_version: str
    rag: "RagServices"
    # Unknown request field names already logged (each is logged once).
    logged_ignored_fields: set[str] = field(default_factory=set)

    @property
    def rag_model_id(self) -> str:
        """Chat completions to this model answer from the caller's documents."""
        return self.model_id + "+rag"

    @property
    def index_version(self) -> Callable[[], str]:
        """The store's version, so cached answers die with the documents they came from."""
        return self.rag.store.index_version


@dataclass
class RagServices:
    """The RAG path's parts, built from settings for the server and the local CLI alike."""

    embedder: Embedder
    store: Store
    ingestor: Ingestor
    retriever: Retriever
    answers: AnswerService

    @classmethod
    def build(
        cls, settings: ServerSettings, engine: LLMEngine, embedder: Embedder
    ) -> "RagServices":
        store = open_store(settings.store_url, embedder.dimension)
        retriever = Retriever(
            store,
            embedder,
            RetrievalSettings(settings.retrieval_top_k, settings.retrieval_candidates),
        )
        builder = PromptBuilder(
            engine.tokenizer,
            engine.max_model_len,
            settings.answer_max_tokens,
            settings.evidence_budget_tokens,
            settings.datamark,
        )
        answers = AnswerService(
            retriever,
            EvidenceSelector(embedder, EvidenceSettings(sentences=settings.evidence_sentences)),
            Answerability.load(settings.answerability_file),
            builder,
            AnswerSettings(
                top_k=settings.retrieval_top_k,
                support_threshold=settings.support_threshold,
                max_tokens=settings.answer_max_tokens,
                extractive_fallback=settings.extractive_fallback,
                style=settings.answer_style,
            ),
            make_reranker(settings.reranker, engine),
        )
        ingestor = Ingestor(store, embedder, settings.chunk_size, settings.chunk_overlap)
        return cls(embedder, store, ingestor, retriever, answers)


def make_reranker(name: str | None, engine: LLMEngine) -> Reranker | None:
    if not name:
        return None
    if name == "llm":
        return LLMReranker(engine.tokenizer)
    return CrossEncoderReranker(name)


def access_for(principal: Principal) -> AccessFilter:
    """The only way the server builds a store filter: from the authenticated principal."""
    return AccessFilter(
        tenant=principal.tenant,
        user=principal.user,
        groups=tuple(sorted(principal.groups)),
        everything=principal.role is Role.ADMIN,
    )
