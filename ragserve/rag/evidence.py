"""Evidence below the chunk: the sentences of the permitted chunks that best answer a question.

Candidates are the sentences of the retrieved chunks (after the ACL filter, so only permitted
text is ever a candidate), table rows included: parsers write a row as one line that names
each cell by its column ("Month: August | CSAT: 4.6"). A line that is a heading, a title or a
question (an FAQ's "What is the per diem?") is not an answer: it becomes the section of the
sentences after it, read with them for word overlap; an FAQ question that holds every content
word of the user's question is that question asked again, and the sentences under it are at
least as close to the user's question as it is.

Each candidate is scored by the cosine similarity of its embedding to the question's (the
reader model's embeddings, all-mpnet-base-v2 by default: larger than retrieval's, which it can
afford because it reads tens of sentences, not the whole index), plus the share of the
question's content words (Porter stems) that the sentence, its section and its document title
hold, plus a term for holding the kind of answer the question expects (a time for "when", a
number for "how many", a name for "who"; question.py), plus a term for a table row whose key
the question names ("Plan: Business" for the Business plan's price), minus a prior for its
chunk's retrieval rank. The weights of the rank and row terms come from a logistic fit of
"this sentence holds the gold answer" on the answerable questions of both development sets
(Wikipedia and the workplace documents) and a sweep on the workplace set; those of the word
and kind terms from a sweep on both sets with the reader model (docs/evaluation.md has the
figures). The best few become the prompt's numbered sources, each keeping its character span
in its document. Chunks overlap, so a sentence seen twice counts once.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ragserve.rag.documents import ScoredChunk
from ragserve.rag.embeddings import Embedder
from ragserve.rag.headings import heads_section
from ragserve.rag.question import HOW_MEASURE, answer_kind_match, row_named
from ragserve.rag.sentences import sentence_spans
from ragserve.rag.text import DATE, NUMBER, WORD, stems

# A word of three letters or more: with a number, a short line still states something.
SHORT_WORD = re.compile(r"[^\W\d_]{3}")


@dataclass(frozen=True)
class EvidenceSettings:
    sentences: int = 3
    # Chosen with the reader model's similarities on both development sets: the best sentence
    # holds the answer for the most one-fact and table questions at 0.5-0.7 and 0.25-0.5.
    overlap_weight: float = 0.6
    kind_weight: float = 0.3
    # Added for a table row whose key the question names (chosen on the workplace set, where
    # 0.2 to 0.5 lift the best sentence holding the answer from 0.82 to 0.85).
    row_weight: float = 0.2
    # Subtracted per place of the sentence's chunk in the retrieval ranking.
    rank_weight: float = 0.05
    # Sentences shorter than this many characters (list stubs) are not evidence, unless they
    # pair a word with a number ("Serves 4.").
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
    # The heading or FAQ question the sentence stands under in its chunk ("" if none).
    section: str = ""
    kind_match: float = 0.5
    # The reader model's embedding of the text, when the sentence was ranked by it.
    vector: np.ndarray | None = field(default=None, repr=False, compare=False)

    def as_source(self) -> ScoredChunk:
        """The sentence as a prompt source: its chunk's identity, its own text and span."""
        return replace(self.chunk, text=self.text, start=self.start, end=self.end, score=self.score)

    @property
    def context(self) -> str:
        """What the sentence says read with its title and section."""
        return f"{self.chunk.title} {self.section} {self.text}"


@dataclass(frozen=True)
class Candidate:
    place: int
    chunk: ScoredChunk
    text: str
    start: int
    end: int
    section: str


def overlap_share(question: str, text: str) -> float:
    """Share of the question's content words (stems) that the text contains."""
    asked = stems(question)
    return len(asked & stems(text)) / len(asked) if asked else 0.0


def unmatched_words(question: str, text: str) -> str:
    """The question's words whose stems the text lacks, in order, function words kept: what
    the question asks beyond what the text names ("who was the father of" for "Who was the
    father of Subutai?" against a sentence on Subutai); "" when the text names it all. What a
    "how" asks to measure ("how long", "how heavy") is the kind of answer, which a number
    states without the word."""
    held = stems(text)
    words = WORD.findall(HOW_MEASURE.sub("how", question.lower()))
    rest = [w for w in words if not stems(w) or not stems(w) <= held]
    return " ".join(rest) if stems(" ".join(rest)) else ""


def _asks_again(question: str, faq_question: str) -> bool:
    """Whether an FAQ's question holds every content word (stem) of the user's question."""
    words = stems(question)
    return bool(words) and words <= stems(faq_question)


class EvidenceSelector:
    def __init__(self, embedder: Embedder, settings: EvidenceSettings | None = None) -> None:
        self.embedder = embedder
        self.settings = settings or EvidenceSettings()

    def candidates(self, chunks: list[ScoredChunk]) -> list[Candidate]:
        """Each distinct sentence that could be an answer, with the section it stands under."""
        seen: set[tuple[str, int]] = set()
        found = []
        for place, chunk in enumerate(chunks):
            section = chunk.heading
            for text, start, end in sentence_spans(chunk.text):
                if heads_section(chunk.text, start, end, chunk.title):
                    section = text.lstrip("#").strip()
                    # A dated heading also states when ("Conductor 5.0 — released 8 April 2025").
                    if not DATE.search(section):
                        continue
                key = (chunk.doc_id, chunk.start + start)
                if key in seen or self._stub(text):
                    continue
                seen.add(key)
                found.append(
                    Candidate(place, chunk, text, chunk.start + start, chunk.start + end, section)
                )
        return found

    def _stub(self, text: str) -> bool:
        short = len(text) < self.settings.min_chars
        return short and not (NUMBER.search(text) and SHORT_WORD.search(text))

    def rank(self, question: str, chunks: list[ScoredChunk]) -> list[Sentence]:
        """Every candidate sentence, best first."""
        return self.rank_each([question], chunks)[0]

    def rank_each(
        self, questions: Sequence[str], chunks: list[ScoredChunk]
    ) -> list[list[Sentence]]:
        """Every candidate sentence, best first, for each question (one embedding call for
        the questions and the candidates together)."""
        found = self.candidates(chunks)
        if not found:
            return [[] for _ in questions]
        # An FAQ entry whose question holds every content word of the user's question is
        # that question asked again, and its answer may share few of its words ("The daily
        # meal allowance ..." under "What is the per diem ...?"): the sentences under it read
        # as close to the user's question as the FAQ's question does, when that is closer.
        asked_again = sorted(
            {
                c.section
                for c in found
                if c.section.endswith("?") and any(_asks_again(q, c.section) for q in questions)
            }
        )
        texts = [*questions, *(c.text for c in found), *asked_again]
        vectors = np.asarray(self.embedder.embed(texts))
        n, m = len(questions), len(found)
        asked, sentences, faq = vectors[:n], vectors[n : n + m], vectors[n + m :]
        ranked = []
        for question, vector in zip(questions, asked, strict=True):
            lifts = {
                section: float(faq_vector @ vector)
                for section, faq_vector in zip(asked_again, faq, strict=True)
                if _asks_again(question, section)
            }
            # -1 is the least a cosine can be: a sentence under no such question keeps its own.
            lifted = np.array([lifts.get(c.section, -1.0) for c in found])
            similarities = np.maximum(sentences @ vector, lifted)
            ranked.append(self._scored(question, found, similarities, sentences))
        return ranked

    def _scored(
        self,
        question: str,
        found: list[Candidate],
        similarities: np.ndarray,
        vectors: np.ndarray,
    ) -> list[Sentence]:
        s = self.settings
        ranked = []
        for candidate, similarity, vector in zip(found, similarities, vectors, strict=True):
            chunk = candidate.chunk
            overlap = overlap_share(question, f"{chunk.title} {candidate.section} {candidate.text}")
            kind = answer_kind_match(question, candidate.text)
            score = (
                float(similarity)
                + s.overlap_weight * overlap
                + s.kind_weight * kind
                + s.row_weight * row_named(question, candidate.text)
                - s.rank_weight * candidate.place
            )
            ranked.append(
                Sentence(
                    chunk,
                    candidate.text,
                    candidate.start,
                    candidate.end,
                    score,
                    float(similarity),
                    overlap,
                    candidate.section,
                    kind,
                    vector,
                )
            )
        return sorted(ranked, key=lambda sentence: -sentence.score)

    def unmatched_similarity(self, question: str, ranked: list[Sentence]) -> float:
        """How close the best sentences come to what the question asks beyond the words they
        share with it: for each of the best few, the reader model's similarity of the
        question's words it lacks (with its title and section) to the sentence; the highest,
        1 when one lacks none. A sentence found by the entity a question names but silent on
        the relation asked for ("the father of") stays low; 0 with no sentence."""
        best = ranked[: self.settings.sentences]
        rests = [unmatched_words(question, sentence.context) for sentence in best]
        if not best or not all(rests):
            return float(bool(best))
        unranked = [s.text for s in best if s.vector is None]
        texts = np.asarray(self.embedder.embed(rests + unranked))
        embedded = iter(texts[len(best) :])
        sentences = np.array([next(embedded) if s.vector is None else s.vector for s in best])
        return float(np.max(np.sum(texts[: len(best)] * sentences, axis=1)))

    def select(self, question: str, chunks: list[ScoredChunk]) -> list[Sentence]:
        return self.rank(question, chunks)[: self.settings.sentences]
