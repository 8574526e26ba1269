"""Evidence below the chunk: the sentences of the permitted chunks that best answer a question.

Each sentence of the retrieved chunks (after the ACL filter, so only permitted text is ever a
candidate) is scored by the cosine similarity of its embedding to the question's, plus a small
term for the share of the question's content words it contains, minus a small prior for its
chunk's retrieval rank. A sentence is read behind its document's title ("Lake Quenmar: Its
maximum depth is ..."), for the embedding and the word overlap alike, so one that names its
subject only as "it" or "he" still matches a question that names it. Measured on the
development set (70 answerable questions, top-5 chunks): the best sentence holds the gold
answer for 0.557 of questions read alone, 0.657 behind the title; the best three for 0.771 and
0.843. The best few become the prompt's numbered sources, each keeping its character span in
its document. Chunks overlap, so a sentence seen twice counts once.
"""

from dataclasses import dataclass, replace

import numpy as np

from ragserve.rag.documents import ScoredChunk
from ragserve.rag.embeddings import Embedder
from ragserve.rag.text import content_words, sentence_spans


@dataclass(frozen=True)
class EvidenceSettings:
    sentences: int = 3
    overlap_weight: float = 0.2
    # Subtracted per place of the sentence's chunk in the retrieval ranking.
    rank_weight: float = 0.01
    # Sentences shorter than this many characters (headings, list stubs) are not evidence.
    min_chars: int = 12


@dataclass(frozen=True)
class Sentence:
    """A sentence of a retrieved chunk; start and end are offsets in the document's text."""

    chunk: ScoredChunk
    text: str
    start: int
    end: int
    score: float
    similarity: float
    overlap: float

    def as_source(self) -> ScoredChunk:
        """The sentence as a prompt source: its chunk's identity, its own text and span."""
        return replace(self.chunk, text=self.text, start=self.start, end=self.end, score=self.score)


def overlap_share(question: str, text: str) -> float:
    """Share of the question's content words that the text contains."""
    asked = content_words(question)
    return len(asked & content_words(text)) / len(asked) if asked else 0.0


class EvidenceSelector:
    def __init__(self, embedder: Embedder, settings: EvidenceSettings | None = None) -> None:
        self.embedder = embedder
        self.settings = settings or EvidenceSettings()

    def candidates(self, chunks: list[ScoredChunk]) -> list[tuple[int, ScoredChunk, str, int, int]]:
        """(chunk rank, chunk, sentence, start, end) of each distinct sentence."""
        seen: set[tuple[str, int]] = set()
        found = []
        for place, chunk in enumerate(chunks):
            for text, start, end in sentence_spans(chunk.text):
                key = (chunk.doc_id, chunk.start + start)
                if len(text) < self.settings.min_chars or key in seen:
                    continue
                seen.add(key)
                found.append((place, chunk, text, chunk.start + start, chunk.start + end))
        return found

    def rank(self, question: str, chunks: list[ScoredChunk]) -> list[Sentence]:
        """Every candidate sentence, best first."""
        found = self.candidates(chunks)
        if not found:
            return []
        in_context = [f"{chunk.title}: {text}" for _, chunk, text, _, _ in found]
        vectors = self.embedder.embed([question, *in_context])
        similarities = np.asarray(vectors[1:]) @ np.asarray(vectors[0])
        ranked = []
        for (place, chunk, text, start, end), similarity in zip(found, similarities, strict=True):
            overlap = overlap_share(question, f"{chunk.title} {text}")
            score = (
                float(similarity)
                + self.settings.overlap_weight * overlap
                - self.settings.rank_weight * place
            )
            ranked.append(Sentence(chunk, text, start, end, score, float(similarity), overlap))
        return sorted(ranked, key=lambda s: -s.score)

    def select(self, question: str, chunks: list[ScoredChunk]) -> list[Sentence]:
        return self.rank(question, chunks)[: self.settings.sentences]
