"""What every evaluation starts from: settings, the dataset, the corpus and its cached index,
and (when generation is needed) the served model running locally."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragserve.engine.async_engine import AsyncEngine
from ragserve.eval.corpus import CorpusError, EvalCorpus, load_corpus
from ragserve.eval.dataset import QAItem, load_dataset
from ragserve.eval.index import IndexSettings, index_path, open_index
from ragserve.rag.embeddings import Embedder
from ragserve.rag.retrieval import RetrievalSettings, Retriever
from ragserve.rag.store import Store
from ragserve.reports import file_digest, run_metadata
from ragserve.services import RagServices, build_embedder
from ragserve.settings import Settings

Progress = Callable[[int, int], None]


@dataclass
class EvalContext:
    settings: Settings
    dataset_path: Path
    items: list[QAItem]
    corpus: EvalCorpus
    embedder: Embedder
    gold: dict[str, str]  # qid -> the gold document's id in the corpus
    progress: Progress | None = None
    _store: Store | None = None

    @classmethod
    def open(
        cls,
        settings: Settings,
        dataset: Path,
        corpus: str,
        corpus_limit: int | None = None,
        progress: Progress | None = None,
    ) -> "EvalContext":
        items = load_dataset(dataset)
        full = load_corpus(corpus)
        resolved = {i.qid: full.resolve(i.gold_doc) for i in items if i.gold_doc}
        gold = {qid: doc_id for qid, doc_id in resolved.items() if doc_id is not None}
        missing = [qid for qid in resolved if qid not in gold]
        if missing:
            raise CorpusError(
                f"{len(missing)} gold documents are not in corpus {corpus} "
                f"(questions {', '.join(missing[:5])}); is the dataset made for it?"
            )
        chosen = full.subset(corpus_limit, set(gold.values()))
        embedder = build_embedder(settings)
        return cls(settings, dataset, items, chosen, embedder, gold, progress)

    @property
    def index_settings(self) -> IndexSettings:
        s = self.settings
        return IndexSettings(
            s.chunk_size, s.chunk_overlap, s.embedding_model, self.embedder.ingest_dtype
        )

    def open_index(self) -> Store:
        """The corpus's index with the configured chunking, built now if not cached."""
        if self._store is None:
            self._store = open_index(self.corpus, self.index_settings, self.embedder, self.progress)
        return self._store

    @property
    def store(self) -> Store:
        return self.open_index()

    @property
    def answerable(self) -> list[QAItem]:
        return [i for i in self.items if i.answerable]

    def retriever(self, candidates: int | None = None) -> Retriever:
        settings = RetrievalSettings(
            self.settings.retrieval_top_k, candidates or self.settings.retrieval_candidates
        )
        return Retriever(self.store, self.embedder, settings)

    def services(self, runner: AsyncEngine, **overrides: Any) -> RagServices:
        """The product's RAG wiring over the evaluation index, with settings overridden."""
        self.open_index()
        url = str(index_path(self.corpus, self.index_settings))
        settings = self.settings.model_copy(update={"store": url, **overrides})
        return RagServices.build(settings, runner.engine, self.embedder)

    def metadata(self, **extra: Any) -> dict[str, Any]:
        """What a report must record to be reproduced."""
        return run_metadata(
            dataset=str(self.dataset_path),
            dataset_digest=file_digest(self.dataset_path),
            questions=len(self.items),
            corpus=self.corpus.name,
            corpus_digest=self.corpus.digest,
            corpus_documents=len(self.corpus.articles),
            model=self.settings.model,
            embedding_model=self.settings.embedding_model,
            settings=self.settings.model_dump(mode="json"),
            **extra,
        )

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
