"""The support judge: does a set of passages entail an answer sentence?

No NLI model ships in this project's packages, so entailment is approximated by two checks that
must both hold, and that differ from the answer pipeline's own citation check (content-word
overlap) so the evaluation does not grade the pipeline with its own rule:

1. grounding: every number and every capitalised name in the sentence (past its first word)
   that the question does not already give occurs in the passages; an invented date, figure or
   person fails here;
2. meaning: the sentence's closest passage sentence, by cosine similarity of all-MiniLM-L6-v2
   embeddings, reaches `threshold` (0.5 by default); a true but unrelated sentence fails here.

It misses paraphrased numbers ("nine" vs "9") and negations that keep the same words.
"""

import re

import numpy as np

from ragserve.rag.embeddings import Embedder
from ragserve.rag.sentences import SENTENCE
from ragserve.rag.text import NUMBER

NAME = re.compile(r"(?<=\s)[A-Z][\w'-]+")


def grounded(sentence: str, passages: list[str], question: str = "") -> bool:
    evidence = " ".join([*passages, question])
    digits = evidence.replace(",", "")
    for number in NUMBER.findall(sentence):
        if number.replace(",", "").rstrip(".") not in digits:
            return False
    lowered = evidence.lower()
    return all(name.lower() in lowered for name in NAME.findall(" " + sentence.strip())[1:])


class SupportJudge:
    def __init__(self, embedder: Embedder, threshold: float = 0.5) -> None:
        self.embedder = embedder
        self.threshold = threshold
        self._vectors: dict[str, np.ndarray] = {}

    def _embed(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, self.embedder.embed(missing), strict=True))
        return np.stack([self._vectors[t] for t in texts])

    def similarity(self, passages: list[str], sentence: str) -> float:
        pieces = [m.group().strip() for p in passages for m in SENTENCE.finditer(p)]
        pieces = [p for p in pieces if p]
        if not pieces:
            return 0.0
        return float((self._embed(pieces) @ self._embed([sentence])[0]).max())

    def __call__(self, passages: list[str], sentence: str, question: str = "") -> bool:
        if not passages or not grounded(sentence, passages, question):
            return False
        return self.similarity(passages, sentence) >= self.threshold
