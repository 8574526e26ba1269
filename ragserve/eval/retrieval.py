"""`ragserve eval retrieval`: where the gold document ranks, for BM25 alone, dense alone, their
hybrid (RRF), and the hybrid reranked by each configured reranker. Documents are ranked by
their best chunk; only answerable questions have a gold document."""

import asyncio
from collections.abc import Callable
from pathlib import Path

from ragserve.eval.context import EvalContext
from ragserve.eval.index import everything
from ragserve.eval.metrics import RANKING_MEASURES, dedupe, ranking_metrics
from ragserve.rag.documents import ScoredChunk
from ragserve.rag.rerank import Generate, Reranker, rerank
from ragserve.reports import markdown_table, run_section, write_report

DEPTH = 10
# Chunks each first-stage search returns, enough to fill DEPTH distinct documents.
CHUNKS = 30
# Hybrid chunks a reranker reorders (LLM reranking costs one prompt per chunk).
RERANK_CHUNKS = 10
MAX_CONCURRENT = 8


async def _rerank_all(
    reranker: Reranker,
    questions: dict[str, str],
    hybrid: dict[str, list[ScoredChunk]],
    generate: Generate,
) -> dict[str, list[ScoredChunk]]:
    limit = asyncio.Semaphore(MAX_CONCURRENT)

    async def one(qid: str) -> tuple[str, list[ScoredChunk]]:
        async with limit:
            chunks = hybrid[qid][:RERANK_CHUNKS]
            return qid, await rerank(reranker, questions[qid], chunks, generate)

    return dict(await asyncio.gather(*(one(q) for q in questions)))


def evaluate(
    context: EvalContext,
    rerankers: dict[str, Reranker] | None = None,
    generate: Generate | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    retriever = context.retriever(CHUNKS)
    access = everything()
    questions = {i.qid: i.question for i in context.answerable}
    relevant = {q: {context.gold[q]} for q in questions}
    chunk_rankings: dict[str, dict[str, list[ScoredChunk]]] = {
        "bm25": {},
        "dense": {},
        "hybrid": {},
    }
    similarity: dict[str, float] = {}
    for item in context.items:
        retrieval = retriever.retrieve(access, item.question, CHUNKS)
        similarity[item.qid] = retrieval.best_similarity
        if item.qid in questions:
            chunk_rankings["hybrid"][item.qid] = retrieval.chunks
            chunk_rankings["bm25"][item.qid] = retriever.keyword(access, item.question, CHUNKS)
            chunk_rankings["dense"][item.qid] = retriever.dense(access, item.question, CHUNKS)
    for name, reranker in (rerankers or {}).items():
        if progress is not None:
            progress(f"reranking with {name}")
        assert generate is not None
        chunk_rankings[f"hybrid+{name}"] = asyncio.run(
            _rerank_all(reranker, questions, chunk_rankings["hybrid"], generate)
        )
    methods, per_query = {}, {}
    for method, by_query in chunk_rankings.items():
        rankings = {q: dedupe([c.doc_id for c in chunks])[:DEPTH] for q, chunks in by_query.items()}
        methods[method], per_query[method] = ranking_metrics(relevant, rankings)
        for qid, ranked in rankings.items():
            per_query[method][qid]["top"] = ranked[:3]
    answerable_sim = [similarity[i.qid] for i in context.items if i.answerable]
    unanswerable_sim = [similarity[i.qid] for i in context.items if not i.answerable]
    return {
        "meta": context.metadata(
            depth=DEPTH, chunks_per_search=CHUNKS, rerank_chunks=RERANK_CHUNKS
        ),
        "questions": len(questions),
        "methods": methods,
        "best_similarity": {
            "answerable": sorted(answerable_sim),
            "unanswerable": sorted(unanswerable_sim),
        },
        "per_query": per_query,
    }


def to_markdown(report: dict) -> str:
    rows = [[m, *v.values()] for m, v in report["methods"].items()]
    sims = report["best_similarity"]
    lines = [
        "# Retrieval evaluation",
        "",
        f"{report['questions']} answerable questions; the gold document's rank among documents "
        "ranked by their best chunk.",
        "",
        markdown_table(["method", *RANKING_MEASURES], rows),
        "",
        "Cosine similarity of the closest chunk (what the refusal threshold reads): answerable "
        f"min {min(sims['answerable'], default=float('nan')):.3f}, unanswerable "
        f"{min(sims['unanswerable'], default=float('nan')):.3f}–"
        f"{max(sims['unanswerable'], default=float('nan')):.3f}.",
        "",
        run_section(report["meta"]),
    ]
    return "\n".join(lines)


def write(report: dict, out_dir: Path) -> list[Path]:
    def bars(figure) -> None:
        axes = figure.subplots()
        methods = list(report["methods"])
        width = 0.8 / len(RANKING_MEASURES)
        for i, measure in enumerate(RANKING_MEASURES):
            values = [report["methods"][m][measure] for m in methods]
            axes.bar([x + i * width for x in range(len(methods))], values, width, label=measure)
        axes.set_xticks([x + 0.4 - width / 2 for x in range(len(methods))], methods)
        axes.set_ylim(0, 1.05)
        axes.legend(fontsize="small", ncols=3)
        axes.set_title("Retrieval of the gold document")

    def similarity(figure) -> None:
        axes = figure.subplots()
        sims = report["best_similarity"]
        axes.hist([sims["answerable"], sims["unanswerable"]], bins=20, label=list(sims))
        axes.set_xlabel("cosine similarity of the closest chunk")
        axes.legend()

    return write_report(
        out_dir,
        "retrieval",
        report,
        to_markdown(report),
        {"metrics": bars, "similarity": similarity},
    )
