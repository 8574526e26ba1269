"""What an answer is: its text, how it was made, its citations, and why a refusal refused.

Kept apart from the service that makes answers (answer.py) so that the server, the CLI and
evaluation read results without the answer path's parts.
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ragserve.rag.citations import Citation
from ragserve.rag.evidence import Sentence
from ragserve.rag.question import answer_kind_match
from ragserve.rag.sentences import as_prose
from ragserve.rag.text import stems

Mode = Literal["generated", "extractive", "refused"]
AnswerStyle = Literal["quote", "generate", "auto"]
RefusalReason = Literal["no_match", "not_stated"]
REFUSALS: dict[RefusalReason, str] = {
    "no_match": "Nothing in the documents you can read matches this question.",
    "not_stated": "The documents you can read that match this question do not state the answer.",
}
# Related passages shown with a "not_stated" refusal.
RELATED_PASSAGES = 2


@dataclass
class AnswerResult:
    answer: str
    mode: Mode
    citations: list[Citation] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    # The calibrated probability that the evidence answers the question.
    answerability: float | None = None
    # A schema answer: the parsed JSON (answer is its JSON text), and the sources of each
    # supported value by JSON pointer.
    value: Any = None
    field_citations: dict[str, list[int]] = field(default_factory=dict)
    # Why a refusal refused, and (for "not_stated") the closest permitted passages, cited.
    refusal: RefusalReason | None = None
    related: list[Citation] = field(default_factory=list)
    # The standalone query retrieval ran on (the question itself unless it was a follow-up).
    query: str = ""
    # When each step of the answer path ran: (name, start, end) in time.perf_counter()
    # seconds; the server's traces are made of them.
    steps: list[tuple[str, float, float]] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        return self.mode == "refused"


def refusal(
    reason: RefusalReason = "not_stated",
    answerability: float | None = None,
    related: Sequence[Sentence] = (),
) -> AnswerResult:
    return AnswerResult(
        REFUSALS[reason],
        "refused",
        answerability=answerability,
        refusal=reason,
        related=[cite(n, s, 0.0) for n, s in enumerate(related[:RELATED_PASSAGES], start=1)],
    )


@dataclass
class AnswerEvent:
    """A piece of streamed text, or (when result is set) the final answer."""

    text: str = ""
    result: AnswerResult | None = None


def cite(n: int, sentence: Sentence, support: float = 1.0) -> Citation:
    """Source n: the sentence quoted exactly, with its span in its document. A related
    passage of a refusal supports nothing (support 0)."""
    chunk = sentence.chunk
    span = (sentence.start, sentence.end)
    return Citation(
        n, chunk.doc_id, chunk.chunk_id, chunk.title, *span, sentence.text, support, chunk.version
    )


def quoted(query: str, chosen: list[Sentence]) -> tuple[str, list[Citation]]:
    """The quote answer: each chosen sentence as prose with its citation number, after its
    heading where that completes it (shown once for the sentences under it)."""
    lines, shown = [], ""
    for n, sentence in enumerate(chosen, start=1):
        heading = _heading_needed(sentence, query)
        line = as_prose(sentence.text)
        new_heading = heading not in ("", shown)
        lines.append(f"{as_prose(heading)}: {line} [{n}]" if new_heading else f"{line} [{n}]")
        shown = heading or shown
    return " ".join(lines), [cite(n, s) for n, s in enumerate(chosen, start=1)]


def _heading_needed(sentence: Sentence, query: str) -> str:
    """The heading a chosen sentence stands under, when it holds words of the question or the
    kind of answer asked that the sentence lacks: it is then part of what the sentence
    answers ("After three months: Have a mid-probation conversation ..." for "When is the
    mid-probation talk?"; a release's heading above its list of changes). Else ""."""
    heading = sentence.section
    # An FAQ's question, a dated heading quoted as itself, or the title the citation names.
    needless = {sentence.text.lstrip("#").strip().lower(), sentence.chunk.title.strip().lower()}
    if not heading or heading.endswith("?") or heading.lower() in needless:
        return ""
    adds_words = (stems(query) & stems(heading)) - stems(sentence.text)
    adds_kind = answer_kind_match(query, heading) > answer_kind_match(query, sentence.text)
    return heading if adds_words or adds_kind else ""


def citations_json(citations: list[Citation]) -> list[dict[str, Any]]:
    return [asdict(c) for c in citations]


def refusal_json(result: AnswerResult) -> dict[str, Any] | None:
    """Why the answer was refused: no permitted passage matched ("no_match"), or passages
    matched but none states the answer ("not_stated", with the closest ones cited)."""
    if not result.refused:
        return None
    return {"reason": result.refusal, "related": citations_json(result.related)}


def answer_json(result: AnswerResult) -> dict[str, Any]:
    return {
        "answer": result.answer,
        "mode": result.mode,
        "refused": result.refused,
        "answerability": result.answerability,
        "citations": citations_json(result.citations),
        "refusal": refusal_json(result),
        "query": result.query,
        "value": result.value,
        "field_citations": result.field_citations,
        "usage": result.usage,
        "timings": result.timings,
    }
