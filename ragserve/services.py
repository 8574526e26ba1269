"""The composition root: the parts ragserve is made of, built from Settings in this one place.

The server, the CLI, evaluation and benchmarks all build their engine, index and RAG path here,
so a new component or setting is wired once.

Models load when first needed: the index opens without its embedding model (listing, showing
or deleting documents never loads it), and ModelOnDemand gives prompt building the language
model's tokenizer and context length from its files, building the engine (weights, KV pool)
only when something generates.
"""

import asyncio
import functools
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ragserve.rag.answer import AnswerService
from ragserve.rag.answerability import Answerability
from ragserve.rag.embeddings import Embedder, embedding_dimension
from ragserve.rag.evidence import EvidenceSelector
from ragserve.rag.ingest import Ingestor
from ragserve.rag.prompt import PromptBuilder
from ragserve.rag.rerank import CrossEncoderReranker, LLMReranker, Reranker
from ragserve.rag.retrieval import Retriever
from ragserve.rag.store import Store, open_store
from ragserve.settings import Settings

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ragserve.engine.async_engine import AsyncEngine
    from ragserve.engine.cache_salt import Narrowing
    from ragserve.engine.client import Generate, TokenizedModel
    from ragserve.engine.engine import LLMEngine
    from ragserve.engine.outputs import RequestOutput
    from ragserve.engine.sampling_params import SamplingParams

# Told, one line each, when something slow starts (loading a model, a first-run build).
Notify = Callable[[str], None]


def _quiet(message: str) -> None:
    pass


def build_engine(settings: Settings, notify: Notify = _quiet) -> "LLMEngine":
    from ragserve.engine import kernels
    from ragserve.engine.engine import LLMEngine

    notify(f"loading the model {settings.model}...")
    if not (kernels.build_directory() / "ragserve_kernels.so").is_file():
        notify("building the C++ kernels (once on this machine, about a minute)...")
    with _loader_notices(notify, settings.model):
        return LLMEngine(settings.engine_config())


@contextmanager
def running_engine(
    settings: Settings, engine: "LLMEngine | None" = None
) -> Iterator["AsyncEngine"]:
    """The configured model in its engine, stepping in a background thread until exit."""
    from ragserve.engine.async_engine import AsyncEngine

    runner = AsyncEngine(engine or build_engine(settings))
    runner.start()
    try:
        yield runner
    finally:
        runner.shutdown()


class ModelOnDemand:
    """The configured model as prompt building sees it (TokenizedModel): its tokenizer and
    context length, read from the model's files. The engine, with its weights and KV pool, is
    built on the first call of a generator's function, once; an answer quoted from the evidence
    never builds it. shutdown() stops it if it was built."""

    def __init__(self, settings: Settings, notify: Notify = _quiet) -> None:
        self.settings = settings
        self.config = settings.engine_config()
        self.notify = notify
        self.runner: AsyncEngine | None = None
        self._starting = threading.Lock()

    @functools.cached_property
    def model_path(self) -> Path:
        from ragserve.engine.loader import resolve_model

        with _loader_notices(self.notify, self.config.model):
            return resolve_model(self.config.model)

    @functools.cached_property
    def tokenizer(self) -> "PreTrainedTokenizerBase":
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.model_path)

    @functools.cached_property
    def max_model_len(self) -> int:
        from transformers import AutoConfig

        from ragserve.engine.config import size_kv_cache
        from ragserve.engine.models import spec_of

        spec = spec_of(AutoConfig.from_pretrained(self.model_path))
        return size_kv_cache(self.config, spec).max_model_len

    def start(self) -> "AsyncEngine":
        """The running engine, built and started on the first call."""
        from ragserve.engine.async_engine import AsyncEngine

        with self._starting:
            if self.runner is None:
                runner = AsyncEngine(build_engine(self.settings, self.notify))
                runner.start()
                self.runner = runner
            return self.runner

    def generator(self, user: str, tenant: str, prefix: str) -> "Generate":
        """As engine.client.generator, starting the engine on the first call."""
        started: Generate | None = None

        async def generate(
            token_ids: list[int], params: "SamplingParams", narrowing: "Narrowing" = ()
        ) -> AsyncIterator["RequestOutput"]:
            nonlocal started
            if started is None:
                from ragserve.engine.client import generator

                runner = await asyncio.to_thread(self.start)
                started = started or generator(runner, user, tenant, prefix)
            async for output in started(token_ids, params, narrowing):
                yield output

        return generate

    def shutdown(self) -> None:
        if self.runner is not None:
            self.runner.shutdown()


@contextmanager
def _loader_notices(notify: Notify, model: str) -> Iterator[None]:
    """One line to notify when the model loader does its one-time work (importing a GGUF
    file on first use), which it logs at INFO; nothing extra where that log is shown anyway."""
    logger = logging.getLogger("ragserve.engine.loader")
    if notify is _quiet or logger.isEnabledFor(logging.INFO):
        yield
        return

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.msg.startswith("importing"):
                notify(f"importing the model {model} (once, on first use)...")

    handler, level, propagate = Handler(logging.INFO), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def build_embedder(settings: Settings) -> Embedder:
    return Embedder(settings.embedding_model, ingest_dtype=settings.embedding_ingest_dtype)


def build_reader(settings: Settings, embedder: Embedder | None = None) -> Embedder:
    """The reader model's embedder (evidence ranking): retrieval's own when it is the same
    model, else one per process and model, shared by every service built in it."""
    if embedder is not None and settings.reader_model == embedder.name:
        return embedder
    return reader_embedder(settings.reader_model)


@functools.cache
def reader_embedder(model: str) -> Embedder:
    # It reads 15 to 35 sentences a question, a batch that embeds faster on every core, unlike
    # retrieval's lone query (Embedder): the workplace set's evidence step, 8 at a time, takes
    # 1.5 s on two cores against 1.9 s on one in bfloat16, 3.4 s against 6.2 s in float32.
    return Embedder(model, threads=os.cpu_count() or 1, query_dtype="auto")


class DocumentIndex:
    """The documents without a model: what ingestion, listing and deletion need. The store
    opens at the embedding model's dimension, read from its files; the model itself is loaded
    the first time something embeds (ingesting, searching)."""

    def __init__(self, settings: Settings, store: Store, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.store = store
        if embedder is not None:
            self.__dict__["embedder"] = embedder

    @classmethod
    def open(cls, settings: Settings, embedder: Embedder | None = None) -> "DocumentIndex":
        dimension = embedding_dimension(settings.embedding_model) if embedder is None else None
        if embedder is None and dimension is None:
            embedder = build_embedder(settings)
        store = open_store(
            settings.store_url, dimension or embedder.dimension, settings.document_versions_kept
        )
        return cls(settings, store, embedder)

    @functools.cached_property
    def embedder(self) -> Embedder:
        embedder = build_embedder(self.settings)
        stored = getattr(self.store, "dimension", embedder.dimension)
        if embedder.dimension != stored:
            raise ValueError(
                f"{self.settings.embedding_model} embeds in {embedder.dimension} dimensions, "
                f"not the {stored} its configuration files say"
            )
        return embedder

    @functools.cached_property
    def ingestor(self) -> Ingestor:
        settings = self.settings
        return Ingestor(self.store, self.embedder, settings.chunk_size, settings.chunk_overlap)


class RagServices:
    """The RAG path's parts over the index: retrieval and cited answers."""

    def __init__(self, index: DocumentIndex, retriever: Retriever, answers: AnswerService) -> None:
        self.index = index
        self.retriever = retriever
        self.answers = answers

    @property
    def embedder(self) -> Embedder:
        return self.index.embedder

    @property
    def store(self) -> Store:
        return self.index.store

    @property
    def ingestor(self) -> Ingestor:
        return self.index.ingestor

    @classmethod
    def build(
        cls, settings: Settings, engine: "TokenizedModel", embedder: Embedder | None = None
    ) -> "RagServices":
        index = DocumentIndex.open(settings, embedder)
        retriever = Retriever(index.store, index.embedder, settings.retrieval_settings())
        builder = PromptBuilder(
            engine,
            settings.answer_output_reserve,
            settings.evidence_budget_tokens,
            settings.datamark,
        )
        answers = AnswerService(
            retriever,
            EvidenceSelector(build_reader(settings, index.embedder), settings.evidence_settings()),
            Answerability.load(settings.answerability_file),
            builder,
            settings.answer_settings(),
            make_reranker(settings.reranker, engine),
        )
        return cls(index, retriever, answers)


def make_reranker(name: str | None, engine: "TokenizedModel") -> Reranker | None:
    """None, "llm" (the served model judges each chunk) or a CrossEncoder folder."""
    if not name:
        return None
    if name == "llm":
        return LLMReranker(engine.tokenizer)
    return CrossEncoderReranker(name)
