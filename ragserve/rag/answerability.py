"""Answerability: how likely the selected evidence answers the question, as a probability.

A logistic model over signals measured on the evidence, fitted by `ragserve eval calibrate`
with cross-validation on the development sets only (Wikipedia questions, the workplace
documents' and the everyday documents' together, so that it holds on more than one kind of
text and of asking), and shipped as a versioned file
(answerability.json beside this module). Two thresholds on its probability make the
decisions: under `refuse_below` the question is refused without a model call; at or over
`quote_above`, an answer that fails the citation check falls back to quoting the evidence.
The similarities it reads are the reader model's (Settings.reader_model), so the file names
that model, and a service whose reader model differs will not start with it.
"""

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from ragserve.rag.embeddings import DEFAULT_EMBEDDING_MODEL
from ragserve.rag.evidence import Sentence, overlap_share
from ragserve.rag.question import missing_share, row_match

PACKAGED = Path(__file__).with_name("answerability.json")
SIGNALS = (
    "best_chunk",
    "best_score",
    "best_similarity",
    "margin",
    "coverage",
    "missing",
    "kind_match",
    "top_two_same_document",
    "row_match",
    "unmatched_similarity",
)


def signals(
    question: str, ranked: list[Sentence], best_chunk: float, unmatched_similarity: float
) -> dict[str, float]:
    """What answerability is fitted on, from the ranked evidence sentences: how close the best
    chunk and the best sentence are to the question, how far ahead the best sentence is, how
    much of the question the best sentence covers (with its title and section), how many of
    the question's names, codes and numbers the best sentence's passage lacks, whether the best
    sentence holds the kind of answer asked for, whether the two best sentences agree on a
    document, whether the best sentence is a table row whose entity and column the question
    both names, and how close the best sentences come to what the question asks beyond the
    words they share with it (EvidenceSelector.unmatched_similarity)."""
    if not ranked:
        return dict.fromkeys(SIGNALS, 0.0) | {"best_chunk": best_chunk, "missing": 1.0}
    best = ranked[0]
    second = ranked[1] if len(ranked) > 1 else None
    # The passage around the best sentence: a date or a name the question gives is often in
    # another line of it ("Date: 15 October" above "Minutes: Tomas Holm").
    passage = f"{best.chunk.title} {best.chunk.text}"
    return {
        "best_chunk": best_chunk,
        "best_score": best.score,
        "best_similarity": best.similarity,
        "margin": best.score - (second.score if second else 0.0),
        "coverage": overlap_share(question, best.context),
        "missing": missing_share(question, passage),
        "kind_match": best.kind_match,
        "top_two_same_document": float(
            second is not None and second.chunk.doc_id == best.chunk.doc_id
        ),
        "row_match": row_match(question, best.text),
        "unmatched_similarity": unmatched_similarity,
    }


@dataclass(frozen=True)
class Answerability:
    version: str
    features: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float
    refuse_below: float
    quote_above: float
    # The reader model whose similarities it was fitted on (a file that does not say was
    # fitted when the reader was retrieval's embedder, all-minilm-l6-v2).
    reader_model: str = DEFAULT_EMBEDDING_MODEL

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
            data.get("reader_model", DEFAULT_EMBEDDING_MODEL),
        )

    def check_reader(self, reader_model: str) -> None:
        """Raise when the model was fitted on another reader model's similarities: its
        thresholds would not mean what they say."""
        if self.reader_model != reader_model:
            raise ValueError(
                f"the answerability model ({self.version}) was fitted with reader model "
                f"{self.reader_model!r}, not {reader_model!r}: refit it with `ragserve eval "
                "calibrate --save-to FILE` under this reader model and set answerability_file"
            )

    def probability(self, measured: dict[str, float]) -> float:
        z = self.bias + sum(
            w * measured[f] for f, w in zip(self.features, self.weights, strict=True)
        )
        return 1.0 / (1.0 + math.exp(-z))

    def to_json(self, **provenance: object) -> str:
        return json.dumps(asdict(self) | provenance, indent=2) + "\n"
