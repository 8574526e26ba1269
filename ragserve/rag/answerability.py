"""Answerability: how likely the selected evidence answers the question, as a probability.

A logistic model over signals measured on the evidence, fitted by `ragserve eval calibrate`
with cross-validation on the development set only, and shipped as a versioned file
(answerability.json beside this module). Two thresholds on its probability make the
decisions: under `refuse_below` the question is refused without a model call; at or over
`quote_above`, an answer that fails the citation check falls back to quoting the evidence.
"""

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from ragserve.rag.evidence import Sentence
from ragserve.rag.text import content_words

PACKAGED = Path(__file__).with_name("answerability.json")
# The sentences whose words count towards coverage: the evidence a prompt carries.
COVERAGE_SENTENCES = 3


def signals(question: str, ranked: list[Sentence], best_chunk: float) -> dict[str, float]:
    """What answerability is fitted on, from the ranked evidence sentences: how close the best
    chunk and the best sentence are to the question, how far ahead the best sentence is, how
    much of the question the evidence covers, and whether the two best sentences agree on a
    document."""
    measured = {"best_chunk": best_chunk}
    if not ranked:
        names = ("best_score", "best_similarity", "margin", "coverage", "top_two_same_document")
        return measured | dict.fromkeys(names, 0.0)
    asked = content_words(question)
    seen = set().union(*(content_words(s.text) for s in ranked[:COVERAGE_SENTENCES]))
    second = ranked[1] if len(ranked) > 1 else None
    return measured | {
        "best_score": ranked[0].score,
        "best_similarity": ranked[0].similarity,
        "margin": ranked[0].score - (second.score if second else 0.0),
        "coverage": len(asked & seen) / len(asked) if asked else 0.0,
        "top_two_same_document": float(
            second is not None and second.chunk.doc_id == ranked[0].chunk.doc_id
        ),
    }


@dataclass(frozen=True)
class Answerability:
    version: str
    features: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float
    refuse_below: float
    quote_above: float

    @classmethod
    def load(cls, path: Path | None = None) -> "Answerability":
        data = json.loads((path or PACKAGED).read_text())
        return cls(
            data["version"],
            tuple(data["features"]),
            tuple(data["weights"]),
            data["bias"],
            data["refuse_below"],
            data["quote_above"],
        )

    def probability(self, measured: dict[str, float]) -> float:
        z = self.bias + sum(
            w * measured[f] for f, w in zip(self.features, self.weights, strict=True)
        )
        return 1.0 / (1.0 + math.exp(-z))

    def to_json(self, **provenance: object) -> str:
        return json.dumps(asdict(self) | provenance, indent=2) + "\n"
