"""Indexes built for evaluation, cached by (corpus digest, chunking, embedding model and the
dtype documents embed in) under RAGSERVE_HOME/eval, so a second run with the same corpus and
settings starts at once."""

import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ragserve.engine.config import cache_dir
from ragserve.eval.corpus import EvalCorpus
from ragserve.rag.documents import AccessFilter, Acl
from ragserve.rag.embeddings import Embedder
from ragserve.rag.ingest import Ingestor
from ragserve.rag.store import Store, open_store

logger = logging.getLogger(__name__)

TENANT = "eval"
OWNER = "eval"
# Bump when what an index holds for the same inputs changes (chunker, parsers, schema).
INDEX_FORMAT = 4


@dataclass(frozen=True)
class IndexSettings:
    chunk_size: int
    chunk_overlap: int
    embedding_model: str
    embedding_dtype: str  # as resolved on this machine: float32 or bfloat16


def everything() -> AccessFilter:
    """Evaluation reads the whole evaluation tenant; the access suite tests filters itself."""
    return AccessFilter(TENANT, OWNER, everything=True)


def index_path(corpus: EvalCorpus, settings: IndexSettings) -> Path:
    key = json.dumps([INDEX_FORMAT, corpus.digest, settings.__dict__], sort_keys=True)
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / "eval" / f"{corpus.digest}-{name}.sqlite"


def open_index(
    corpus: EvalCorpus,
    settings: IndexSettings,
    embedder: Embedder,
    progress: Callable[[int, int], None] | None = None,
) -> Store:
    """The corpus's index, from the cache or built. A new one is built under a temporary name
    and renamed when complete, so an interrupted build is never reused."""
    path = index_path(corpus, settings)
    if path.is_file():
        return open_store(str(path), embedder.dimension)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    store = open_store(str(partial), embedder.dimension)
    ingestor = Ingestor(
        store,
        embedder,
        settings.chunk_size,
        settings.chunk_overlap,
        allow_truncated_embeddings=True,
    )
    total, done = len(corpus.articles), 0

    def advance(_: object) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    results = ingestor.ingest_many(corpus.sources(), TENANT, OWNER, Acl(), progress=advance)
    store.close()
    failed = [r for r in results if not r.ok]
    if failed:
        partial.unlink(missing_ok=True)
        raise ValueError(f"{len(failed)} corpus documents failed to ingest: {failed[0].error}")
    partial.rename(path)
    logger.info("indexed %d documents into %s", total, path)
    return open_store(str(path), embedder.dimension)
