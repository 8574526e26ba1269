"""The composition root: the parts ragserve is made of, built from Settings in this one place.

The server, the CLI, evaluation and benchmarks all build their engine, index and RAG path here,
so a new component or setting is wired once.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ragserve.engine.async_engine import AsyncEngine
from ragserve.engine.client import TokenizedModel
from ragserve.engine.engine import LLMEngine
from ragserve.rag.answer import AnswerService
from ragserve.rag.answerability import Answerability
from ragserve.rag.embeddings import Embedder
from ragserve.rag.evidence import EvidenceSelector
from ragserve.rag.ingest import Ingestor
from ragserve.rag.prompt import PromptBuilder
from ragserve.rag.rerank import CrossEncoderReranker, LLMReranker, Reranker
from ragserve.rag.retrieval import Retriever
from ragserve.rag.store import Store, open_store
from ragserve.settings import Settings


def build_engine(settings: Settings) -> LLMEngine:
    return LLMEngine(settings.engine_config())


@contextmanager
def running_engine(settings: Settings, engine: LLMEngine | None = None) -> Iterator[AsyncEngine]:
    """The configured model in its engine, stepping in a background thread until exit."""
    runner = AsyncEngine(engine or build_engine(settings))
    runner.start()
    try:
        yield runner
    finally:
        runner.shutdown()


@dataclass
class DocumentIndex:
    """The documents without a model: what ingestion, listing and deletion need."""

    embedder: Embedder
    store: Store
    ingestor: Ingestor

    @classmethod
    def open(cls, settings: Settings, embedder: Embedder | None = None) -> "DocumentIndex":
        embedder = embedder or Embedder(settings.embedding_model)
        store = open_store(settings.store_url, embedder.dimension)
        ingestor = Ingestor(store, embedder, settings.chunk_size, settings.chunk_overlap)
        return cls(embedder, store, ingestor)


@dataclass
class RagServices:
    """The RAG path's parts over the index: retrieval and cited answers."""

    embedder: Embedder
    store: Store
    ingestor: Ingestor
    retriever: Retriever
    answers: AnswerService

    @classmethod
    def build(
        cls, settings: Settings, engine: TokenizedModel, embedder: Embedder | None = None
    ) -> "RagServices":
        index = DocumentIndex.open(settings, embedder)
        retriever = Retriever(index.store, index.embedder, settings.retrieval_settings())
        builder = PromptBuilder(
            engine.tokenizer,
            engine.max_model_len,
            settings.answer_output_reserve,
            settings.evidence_budget_tokens,
            settings.datamark,
        )
        answers = AnswerService(
            retriever,
            EvidenceSelector(index.embedder, settings.evidence_settings()),
            Answerability.load(settings.answerability_file),
            builder,
            settings.answer_settings(),
            make_reranker(settings.reranker, engine),
        )
        return cls(index.embedder, index.store, index.ingestor, retriever, answers)


def make_reranker(name: str | None, engine: TokenizedModel) -> Reranker | None:
    """None, "llm" (the served model judges each chunk) or a CrossEncoder folder."""
    if not name:
        return None
    if name == "llm":
        return LLMReranker(engine.tokenizer)
    return CrossEncoderReranker(name)
