"""`ragserve eval chunking`: retrieval quality and prompt cost per chunk size, on long documents.

The Wikipedia corpus is ordered by topic (the vital-articles list: arts, then people, history,
...), so runs of consecutive introductions make long per-topic documents. Each run of `group`
articles becomes one document, its articles separated by blank lines. A retrieved chunk is
relevant when its span overlaps the gold article's span inside its document; metrics are those
of the first relevant chunk's rank. Prompt cost is the model's tokens in the top-k chunks.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ragserve.eval.context import EvalContext
from ragserve.eval.corpus import EvalCorpus
from ragserve.eval.index import IndexSettings, everything, open_index
from ragserve.eval.metrics import contains_answer, dedupe, ranking_metrics
from ragserve.rag.corpus import Article
from ragserve.rag.retrieval import RetrievalSettings, Retriever
from ragserve.reports import markdown_table, run_section, write_report

GOLD = "gold"
CANDIDATES = 30


@dataclass(frozen=True)
class Placement:
    doc_id: str
    start: int
    end: int


def group_articles(corpus: EvalCorpus, group: int) -> tuple[EvalCorpus, dict[str, Placement]]:
    """Long documents of `group` consecutive articles, and where each article landed."""
    documents, placements = [], {}
    for first in range(0, len(corpus.articles), group):
        members = corpus.articles[first : first + group]
        doc_id = f"topic-{first // group:04d}"
        parts, offset = [], 0
        for article in members:
            piece = f"{article.title}\n\n{article.text}"
            placements[article.doc_id] = Placement(doc_id, offset, offset + len(piece))
            parts.append(piece)
            offset += len(piece) + 2
        title = f"{members[0].title} … {members[-1].title}"
        documents.append(Article(doc_id, title, "\n\n".join(parts)))
    return EvalCorpus(f"{corpus.name}/groups-of-{group}", documents), placements


def evaluate(
    context: EvalContext,
    sizes: list[int],
    group: int,
    count_tokens: Callable[[str], int],
    progress: Callable[[str], None] | None = None,
) -> dict:
    grouped, placements = group_articles(context.corpus, group)
    top_k = context.settings.retrieval_top_k
    rows = {}
    for size in sizes:
        overlap = max(0, size // 8)
        settings = IndexSettings(
            size, overlap, context.settings.embedding_model, context.embedder.ingest_dtype
        )

        def indexing(done: int, total: int, size: int = size) -> None:
            if progress is not None:
                progress(f"chunk size {size}: indexing {done}/{total} documents")

        store = open_index(grouped, settings, context.embedder, indexing)
        retriever = Retriever(store, context.embedder, RetrievalSettings(top_k, CANDIDATES))
        rankings, relevant, answer_hits, prompt_tokens, chunk_tokens = {}, {}, [], [], []
        for item in context.answerable:
            gold = placements[context.gold[item.qid]]
            chunks = retriever.retrieve(everything(), item.question, CANDIDATES).chunks
            labels = [
                GOLD
                if c.doc_id == gold.doc_id and c.start < gold.end and c.end > gold.start
                else c.chunk_id
                for c in chunks
            ]
            rankings[item.qid] = dedupe(labels)[:10]
            relevant[item.qid] = {GOLD}
            top = chunks[:top_k]
            answer_hits.append(contains_answer(" ".join(c.text for c in top), item.answers))
            tokens = [count_tokens(c.text) for c in top]
            prompt_tokens.append(sum(tokens))
            chunk_tokens += tokens
        store.close()
        metrics, _ = ranking_metrics(relevant, rankings)
        rows[size] = metrics | {
            f"answer_in_top{top_k}": sum(answer_hits) / len(answer_hits),
            f"prompt_tokens_top{top_k}": sum(prompt_tokens) / len(prompt_tokens),
            "tokens_per_chunk": sum(chunk_tokens) / max(1, len(chunk_tokens)),
            "embedding_truncated": size > context.embedder.max_tokens,
        }
    return {
        "meta": context.metadata(group=group, documents=len(grouped.articles), top_k=top_k),
        "questions": len(context.answerable),
        "sizes": rows,
        "choice": choose(rows, top_k),
    }


def choose(rows: dict[int, dict], top_k: int) -> dict:
    """The smallest size within 0.01 of the best MRR and of the best answer-in-top-k, among
    sizes the embedder reads whole: the gold passage ranks high and the answer itself reaches
    the prompt, then the cheapest prompt."""
    usable = {s: r for s, r in rows.items() if not r["embedding_truncated"]} or rows
    answer = f"answer_in_top{top_k}"
    best_mrr = max(r["mrr"] for r in usable.values())
    best_answer = max(r[answer] for r in usable.values())
    size = min(
        s
        for s, r in usable.items()
        if r["mrr"] >= best_mrr - 0.01 and r[answer] >= best_answer - 0.01
    )
    return {
        "chunk_size": size,
        "mrr": rows[size]["mrr"],
        answer: rows[size][answer],
        "rule": " ".join((choose.__doc__ or "").split()),
    }


def to_markdown(report: dict) -> str:
    sizes = report["sizes"]
    headers = list(next(iter(sizes.values())))
    choice = report["choice"]
    lines = [
        "# Chunk size evaluation",
        "",
        f"{report['meta']['documents']} long documents of {report['meta']['group']} "
        f"consecutive articles; {report['questions']} answerable questions.",
        "",
        markdown_table(["chunk size", *headers], [[s, *r.values()] for s, r in sizes.items()]),
        "",
        f"Chosen: {choice['chunk_size']} tokens. Rule: {choice['rule']}",
        "",
        run_section(report["meta"]),
    ]
    return "\n".join(lines)


def write(report: dict, out_dir: Path) -> list[Path]:
    sizes = [int(s) for s in report["sizes"]]
    rows = list(report["sizes"].values())

    def tradeoff(figure) -> None:
        axes = figure.subplots()
        for measure in ("recall@1", "recall@5", "mrr"):
            axes.plot(sizes, [r[measure] for r in rows], marker="o", label=measure)
        axes.set_xscale("log", base=2)
        axes.set_xticks(sizes, [str(s) for s in sizes])
        axes.set_xlabel("chunk size (tokens)")
        axes.set_ylim(0, 1.05)
        cost = axes.twinx()
        key = next(k for k in rows[0] if k.startswith("prompt_tokens"))
        cost.bar(sizes, [r[key] for r in rows], width=[s * 0.3 for s in sizes], alpha=0.25)
        cost.set_ylabel(key)
        axes.legend(loc="lower right")

    return write_report(out_dir, "chunking", report, to_markdown(report), {"tradeoff": tradeoff})
