"""Ingestion throughput and filtered search latency on the bundled Wikipedia corpus.

Every document gets an ACL: one in ten is readable by the group "rare", the rest by "common".
Searches run as a member of "rare" only, so the ACL admits 10% of the documents and k results
must still come back.
"""

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ragserve.rag.corpus import load_wiki, wiki_sources
from ragserve.rag.documents import AccessFilter, Acl
from ragserve.rag.embeddings import Embedder
from ragserve.rag.ingest import Ingestor
from ragserve.rag.retrieval import RetrievalSettings, Retriever
from ragserve.rag.store import Store, open_store
from ragserve.reports import percentile

TENANT = "bench"
T = TypeVar("T")


def timed(fn: Callable[..., T], *args: object) -> tuple[float, T]:
    start = time.perf_counter()
    result = fn(*args)
    return (time.perf_counter() - start) * 1000, result


def ingest_corpus(store: Store, embedder: Embedder, limit: int | None, chunk_size: int) -> dict:
    ingestor = Ingestor(store, embedder, chunk_size, chunk_size // 8)
    articles = load_wiki(limit=limit)
    rare = Acl.of(groups=["rare"])
    common = Acl.of(groups=["common"])
    sources = list(wiki_sources(articles))
    start = time.perf_counter()
    # Two batches, one per ACL, as an operator would ingest them.
    results = ingestor.ingest_many(sources[::10], TENANT, "bench", rare)
    results += ingestor.ingest_many(
        [s for i, s in enumerate(sources) if i % 10], TENANT, "bench", common
    )
    chunks = sum(r.chunks for r in results)
    seconds = time.perf_counter() - start
    return {
        "documents": len(articles),
        "chunks": chunks,
        "seconds": seconds,
        "chunks_per_s": chunks / seconds,
        "documents_per_s": len(articles) / seconds,
    }


def search_latency(store: Store, embedder: Embedder, queries: list[str], k: int) -> dict:
    reader = AccessFilter(TENANT, "reader", ("rare",))
    retriever = Retriever(store, embedder, RetrievalSettings(top_k=k))
    vectors = embedder.embed(queries)
    keyword, dense, hybrid, short = [], [], [], 0
    for query, vector in zip(queries, vectors, strict=True):
        ms, _ = timed(store.keyword_search, reader, query, k)
        keyword.append(ms)
        ms, found = timed(store.vector_search, reader, vector, k)
        dense.append(ms)
        short += len(found) < k
        ms, _ = timed(retriever.hybrid, reader, query, k)
        hybrid.append(ms)

    def summary(values: list[float]) -> dict:
        return {
            "p50_ms": percentile(values, 50),
            "p99_ms": percentile(values, 99),
            "mean_ms": statistics.fmean(values),
        }

    return {
        "queries": len(queries),
        "k": k,
        "keyword": summary(keyword),
        "dense": summary(dense),
        "hybrid (embedding included)": summary(hybrid),
        "dense searches returning fewer than k": short,
    }


def run(
    store_url: str, limit: int | None, queries: int, k: int, chunk_size: int, dtype: str
) -> dict:
    embedder = Embedder(ingest_dtype=dtype)
    store = open_store(store_url, embedder.dimension)
    report = {
        "store": store_url.split("@")[-1],
        "chunk_size": chunk_size,
        "embedding_dtype": embedder.ingest_dtype,
    }
    report["ingest"] = ingest_corpus(store, embedder, limit, chunk_size)
    # Questions a user might ask: the first sentence of rare-group articles, shortened.
    articles = load_wiki(limit=limit)
    texts = [a.text.split(". ")[0][:120] for a in articles[::10][:queries]]
    report["search"] = search_latency(store, embedder, texts, k)
    store.close()
    return report


def write_report(report: dict, out_dir: Path, name: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(report, indent=2))
