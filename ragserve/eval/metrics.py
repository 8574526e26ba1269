"""The metrics. Ranking metrics come from ir-measures (pytrec_eval underneath); answer metrics
follow SQuAD (normalised containment, token F1); citation metrics follow ALCE (Gao et al.,
2023) with the entailment judge passed in."""

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ir_measures

RANKING_MEASURES = {
    "recall@1": ir_measures.R @ 1,
    "recall@5": ir_measures.R @ 5,
    "recall@10": ir_measures.R @ 10,
    "mrr": ir_measures.RR,
    "ndcg@10": ir_measures.nDCG @ 10,
}


def ranking_metrics(
    relevant: dict[str, set[str]], rankings: dict[str, list[str]]
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Mean and per-query metrics of ranked document ids against the relevant ones. A query
    with an empty ranking counts as zero (pytrec_eval alone would skip it)."""
    qrels = [ir_measures.Qrel(q, d, 1) for q, docs in relevant.items() for d in docs]
    run = [
        ir_measures.ScoredDoc(q, d, float(len(ranked) - rank))
        for q, ranked in rankings.items()
        for rank, d in enumerate(ranked)
    ]
    names = {measure: name for name, measure in RANKING_MEASURES.items()}
    per_query = {q: dict.fromkeys(RANKING_MEASURES, 0.0) for q in relevant}
    for metric in ir_measures.iter_calc(list(RANKING_MEASURES.values()), qrels, run):
        if metric.query_id in per_query:
            per_query[metric.query_id][names[metric.measure]] = float(metric.value)
    mean = {
        name: sum(m[name] for m in per_query.values()) / max(1, len(per_query))
        for name in RANKING_MEASURES
    }
    return mean, per_query


def dedupe(ids: Sequence[str]) -> list[str]:
    """Chunk-level document ids to a document ranking: first occurrence wins."""
    return list(dict.fromkeys(ids))


def normalize(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def contains_answer(prediction: str, answers: Sequence[str]) -> bool:
    predicted = f" {normalize(prediction)} "
    return any(f" {normalize(a)} " in predicted for a in answers if normalize(a))


def token_f1(prediction: str, answers: Sequence[str]) -> float:
    """The best token F1 of the prediction against any gold answer."""
    predicted = normalize(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize(answer).split()
        common = sum((Counter(predicted) & Counter(gold)).values())
        if common:
            precision, recall = common / len(predicted), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


@dataclass
class PRF:
    precision: float
    recall: float
    f1: float


def precision_recall_f1(predicted: Sequence[bool], actual: Sequence[bool]) -> PRF:
    true_pos = sum(p and a for p, a in zip(predicted, actual, strict=True))
    precision = true_pos / sum(predicted) if any(predicted) else 0.0
    recall = true_pos / sum(actual) if any(actual) else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return PRF(precision, recall, f1)


# Whether these passages, together, entail this sentence.
Entails = Callable[[list[str], str], bool]


@dataclass
class CitedSentence:
    text: str
    passages: list[str]  # the passages the sentence cites, in order


@dataclass
class CitationScores:
    recall: float  # share of sentences entailed by their citations
    precision: float  # share of citations that are needed or sufficient
    citations: int
    sentences: int


def alce_citation_scores(sentences: list[CitedSentence], entails: Entails) -> CitationScores:
    """ALCE citation recall and precision for one answer.

    Recall: a sentence counts if it has citations and they jointly entail it. Precision: a
    citation counts if its sentence is entailed by its citations and the citation either
    entails the sentence alone or is needed (the others alone do not entail it).
    """
    supported, precise, citations = 0, 0, 0
    for sentence in sentences:
        passages = sentence.passages
        citations += len(passages)
        if not passages or not entails(passages, sentence.text):
            continue
        supported += 1
        if len(passages) == 1:
            precise += 1
            continue
        for i, passage in enumerate(passages):
            others = passages[:i] + passages[i + 1 :]
            if entails([passage], sentence.text) or not entails(others, sentence.text):
                precise += 1
    return CitationScores(
        supported / len(sentences) if sentences else 0.0,
        precise / citations if citations else 0.0,
        citations,
        len(sentences),
    )


def rate(flags: list[bool]) -> float:
    """The share of true flags; NaN when there are none."""
    return sum(flags) / len(flags) if flags else float("nan")
