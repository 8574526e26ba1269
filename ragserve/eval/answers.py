"""`ragserve eval answers`: the whole answer path on every question, scored in two parts.

Retrieval: is the gold document among the passages the prompt was built from. Generation:
correctness (a gold answer contained, token F1), support and ALCE citation precision/recall
(each answer sentence judged only against the passages it cites), refusals on unanswerable
questions, latency and tokens. The model's raw text (before the citation check) is scored too,
so a weak model and a strict check can be told apart.
"""

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, replace
from pathlib import Path

from ragserve.engine.cache_salt import Narrowing
from ragserve.engine.outputs import RequestOutput
from ragserve.engine.sampling_params import SamplingParams
from ragserve.eval.claims import cited_sentences
from ragserve.eval.context import EvalContext
from ragserve.eval.dataset import QAItem
from ragserve.eval.index import everything
from ragserve.eval.metrics import (
    alce_citation_scores,
    contains_answer,
    precision_recall_f1,
    token_f1,
)
from ragserve.rag.answer import AnswerResult, AnswerService
from ragserve.rag.answerability import Answerability
from ragserve.rag.citations import Citation
from ragserve.rag.conversation import read_turn
from ragserve.rag.documents import AccessFilter, ScoredChunk
from ragserve.rag.rerank import Generate
from ragserve.rag.retrieval import Retriever
from ragserve.rag.text import CITATION
from ragserve.reports import markdown_table, run_section, summary, write_report

MAX_CONCURRENT = 8


async def answer_one(
    service: AnswerService,
    question: str,
    generate: Generate,
    access: AccessFilter,
    schema: str | None = None,
    history: tuple[str, ...] = (),
) -> tuple[AnswerResult, str]:
    """The answer, and the model's raw text for the answer prompt (the last prompt it ran)."""
    raw = [""]

    async def recording(
        token_ids: list[int], params: SamplingParams, narrowing: Narrowing = ()
    ) -> AsyncIterator[RequestOutput]:
        async for output in generate(token_ids, params, narrowing):
            raw[0] = output.outputs[0].text
            yield output

    result = None
    events = service.answer(access, question, recording, schema=schema, history=history)
    async for event in events:
        result = event.result or result
    assert result is not None
    return result, raw[0]


# The answer path with parts taken away, to measure what each part buys. Generating: sentence
# selection alone (content-word citation check, no quote fallback, the old refusal rule: closest
# chunk under cosine 0.5), then with the strict check, then with the fallback. In the configured
# style: "one-sentence" answers with one sentence, none chosen for a second part or to cover
# the rest of the question; "no-history" asks follow-ups without their conversation. "full" is
# the configured path.
VARIANTS = ("sentences", "strict", "fallback", "one-sentence", "no-history", "full")
SIMILARITY_RULE = Answerability("closest-chunk-0.5", ("best_chunk",), (1000.0,), -500.0, 0.5, 0.5)


def ablated(service: AnswerService, variant: str) -> AnswerService:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: {', '.join(VARIANTS)}")
    if variant in ("full", "no-history"):
        return service
    if variant == "one-sentence":
        settings = replace(service.settings, answer_sentences=1)
        return AnswerService(
            service.retriever,
            service.selector,
            service.answerability,
            service.builder,
            settings,
            service.reranker,
        )
    settings = replace(
        service.settings,
        style="generate",
        strict_support=variant != "sentences",
        extractive_fallback=variant == "fallback",
    )
    return AnswerService(
        service.retriever,
        service.selector,
        SIMILARITY_RULE,
        service.builder,
        settings,
        service.reranker,
    )


async def answer_all(
    service: AnswerService,
    items: list[QAItem],
    generate: Generate,
    progress: Callable[[int], None] | None = None,
    schema: str | None = None,
    with_history: bool = True,
) -> list[tuple[AnswerResult, str]]:
    limit = asyncio.Semaphore(MAX_CONCURRENT)
    done = 0

    async def one(item: QAItem) -> tuple[AnswerResult, str]:
        nonlocal done
        async with limit:
            history = item.history if with_history else ()
            outcome = await answer_one(
                service, item.question, generate, everything(), schema, history
            )
        done += 1
        if progress is not None:
            progress(done)
        return outcome

    return list(await asyncio.gather(*(one(i) for i in items)))


def score(
    context: EvalContext,
    outcomes: list[tuple[AnswerResult, str]],
    judge: Callable[[list[str], str, str], bool],
) -> dict:
    retriever = context.retriever()
    records = []
    for item, (result, raw) in zip(context.items, outcomes, strict=True):
        reading = read_turn(item.question, item.history)
        retrieved = retriever.retrieve_turn(everything(), reading).chunks
        # The passages as the answer read them: whole sentences at the chunks' edges.
        passages = {c.chunk_id: c.text for c in retriever.whole_sentences(everything(), retrieved)}
        # A table's superlative cites the row it compared, wherever in its document it is.
        elsewhere = [c for c in result.citations if c.chunk_id not in passages]
        for chunk in retriever.whole_sentences(everything(), _chunks_of(retriever, elsewhere)):
            passages.setdefault(chunk.chunk_id, chunk.text)
        record = {
            "qid": item.qid,
            "kind": item.kind,
            "type": item.type,
            "refusal": result.refusal,
            "refused": result.refused,
            "mode": result.mode,
            "answerability": result.answerability,
            "answer": result.answer,
            "raw": raw,
            "gold_retrieved": context.gold.get(item.qid) in {c.doc_id for c in retrieved},
            "cited_docs": [c.doc_id for c in result.citations],
            "usage": result.usage,
            "timings": result.timings,
        }
        if item.answerable:
            answered = "" if result.refused else CITATION.sub("", result.answer)
            # Every needed fact (a two-part question has two), each given as aliases.
            record["correct"] = all(contains_answer(answered, fact) for fact in item.facts)
            record["f1"] = token_f1(answered, item.answers)
            record["raw_correct"] = contains_answer(raw, item.answers)
        if not result.refused:
            sentences = cited_sentences(result, passages)
            scores = alce_citation_scores(
                sentences, functools.partial(judge, question=item.question)
            )
            record["citation"] = asdict(scores)
            record["supported"] = scores.sentences > 0 and scores.recall == 1.0
        records.append(record)
    return summarize(records)


def _chunks_of(retriever: Retriever, citations: list[Citation]) -> list[ScoredChunk]:
    """The chunks the citations name, from their documents."""
    wanted = {c.chunk_id for c in citations}
    documents = retriever.documents(everything(), [c.doc_id for c in citations])
    return [chunk for document in documents for chunk in document if chunk.chunk_id in wanted]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def summarize(records: list[dict]) -> dict:
    answerable = [r for r in records if r["kind"] == "answerable"]
    answered = [r for r in records if not r["refused"]]
    hit = [r for r in answerable if r["gold_retrieved"]]
    refusal = precision_recall_f1(
        [r["refused"] for r in records], [r["kind"] == "unanswerable" for r in records]
    )
    generated = [r for r in records if r["usage"]]
    return {
        "questions": len(records),
        "retrieval": {"gold_in_prompt": _mean([r["gold_retrieved"] for r in answerable])},
        "generation": {
            "answered": len(answered),
            "generated": sum(r["mode"] == "generated" for r in records),
            "extractive": sum(r["mode"] == "extractive" for r in records),
            "correct": _mean([r["correct"] for r in answerable]),
            "f1": _mean([r["f1"] for r in answerable]),
            "correct_when_gold_in_prompt": _mean([r["correct"] for r in hit]),
            "raw_correct": _mean([r["raw_correct"] for r in answerable]),
            "supported": _mean([r["supported"] for r in answered]),
            "citation_precision": _mean([r["citation"]["precision"] for r in answered]),
            "citation_recall": _mean([r["citation"]["recall"] for r in answered]),
        },
        "refusal": asdict(refusal)
        | {
            "answerable_refused": _mean([r["refused"] for r in answerable]),
            "unanswerable_refused": _mean(
                [r["refused"] for r in records if r["kind"] == "unanswerable"]
            ),
        },
        "by_type": {
            kind: {
                "questions": len(group),
                "correct": _mean([r["correct"] for r in group]),
                "refused": _mean([r["refused"] for r in group]),
            }
            for kind in dict.fromkeys(r["type"] for r in answerable)
            for group in [[r for r in answerable if r["type"] == kind]]
        },
        "latency_ms": {
            name: summary([r["timings"][name] for r in records if name in r["timings"]])
            for name in ("retrieval_ms", "ttft_ms", "total_ms")
        },
        "tokens": {
            "prompt_mean": _mean([r["usage"]["prompt_tokens"] for r in generated]),
            "output_mean": _mean([r["usage"]["completion_tokens"] for r in generated]),
            "generated_for": len(generated),
        },
        "records": records,
    }


def to_markdown(report: dict) -> str:
    generation, refusal = report["generation"], report["refusal"]
    latency = report["latency_ms"]
    lines = [
        "# Answer evaluation",
        "",
        f"{report['questions']} questions, {report['meta']['concurrency']} at a time.",
        "",
        "## Retrieval (what the prompt held)",
        "",
        f"Gold document among the prompt's passages: {report['retrieval']['gold_in_prompt']:.3f} "
        "of answerable questions.",
        "",
        "## Generation",
        "",
        markdown_table(["metric", "value"], [[k, v] for k, v in generation.items()]),
        "",
        "## Answerable questions by type (correct: every needed fact in the answer)",
        "",
        markdown_table(
            ["type", "questions", "correct", "refused"],
            [[k, *v.values()] for k, v in report["by_type"].items()],
        ),
        "",
        "## Refusal (positive: refused; relevant: unanswerable)",
        "",
        markdown_table(["metric", "value"], [[k, v] for k, v in refusal.items()]),
        "",
        "## Latency and tokens",
        "",
        markdown_table(
            ["ms", "mean", "p50", "p90", "p99"], [[k, *v.values()] for k, v in latency.items()]
        ),
        "",
        f"Prompt tokens per generated answer {report['tokens']['prompt_mean']:.0f}, output "
        f"tokens {report['tokens']['output_mean']:.0f} ({report['tokens']['generated_for']} "
        "answers generated; the rest refused before generation).",
        "",
        run_section(report["meta"]),
    ]
    return "\n".join(lines)


def write(report: dict, out_dir: Path) -> list[Path]:
    def outcomes(figure) -> None:
        axes = figure.subplots()
        names = [
            "gold in prompt",
            "correct",
            "raw correct",
            "supported",
            "cit. precision",
            "cit. recall",
            "refusal F1",
        ]
        values = [
            report["retrieval"]["gold_in_prompt"],
            report["generation"]["correct"],
            report["generation"]["raw_correct"],
            report["generation"]["supported"],
            report["generation"]["citation_precision"],
            report["generation"]["citation_recall"],
            report["refusal"]["f1"],
        ]
        axes.bar(names, [0 if v != v else v for v in values])
        axes.set_ylim(0, 1.05)
        axes.tick_params(axis="x", labelrotation=30)
        axes.set_title("Answers: retrieval, generation, refusal")

    def latency(figure) -> None:
        axes = figure.subplots()
        totals = [r["timings"]["total_ms"] for r in report["records"]]
        axes.hist(totals, bins=20)
        axes.set_xlabel("end-to-end answer latency (ms)")

    return write_report(
        out_dir, "answers", report, to_markdown(report), {"scores": outcomes, "latency": latency}
    )
