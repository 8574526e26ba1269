"""Citations: whether a source supports a sentence of an answer, and the checker that keeps only
supported [n] markers (answer.py says how answers use it).

A sentence is supported by a source when the source contains its numbers (with their units:
"1,800 Euros" is not supported by "1,800 NOK"), its names and multi-word terms as written, and
enough of its new content words (the threshold), and says it in the same polarity (a claim with
"not" is not supported by a source sentence without one, nor the other way round); restating
the question earns nothing. A sentence without a citation gets the best-supporting source when one
passes (post-hoc attribution, for a small model that cites unreliably).
"""

from dataclasses import dataclass

from ragserve.rag.documents import ScoredChunk
from ragserve.rag.prompt import PromptSource
from ragserve.rag.sentences import SENTENCE, sentence_spans
from ragserve.rag.text import (
    CITATION,
    contains_phrase,
    content_words,
    introduced_names,
    introduced_phrases,
    negated,
    numbers,
    quantities,
)


@dataclass
class Citation:
    n: int
    doc_id: str
    chunk_id: str
    title: str
    start: int
    end: int
    quote: str
    support: float
    # The version of the document the quote was read from.
    version: int = 0


def support_score(sentence: str, question: str, source: ScoredChunk, strict: bool = True) -> float:
    """How well a source supports an answer sentence, 0 to 1: the share of the sentence's
    content words beyond the question's that the source contains, and (strict) 0 when a number
    or a multi-word name or term that the sentence introduces is not in the source as written
    (an invented name cannot pass on words that occur apart)."""
    if strict and not numbers(sentence) - numbers(question) <= numbers(source.text):
        return 0.0
    if strict and not _units_agree(sentence, source.text):
        return 0.0
    phrases = introduced_phrases(sentence, question) if strict else []
    phrases += introduced_names(sentence, question) if strict else []
    if not all(contains_phrase(source.text, p) for p in phrases):
        return 0.0
    if strict and negated(sentence) != negated(best_quote(sentence, source)[0]):
        return 0.0
    claims = content_words(sentence) - content_words(question)
    if not claims:
        return 0.0
    return len(claims & content_words(source.text)) / len(claims)


def _units_agree(sentence: str, source: str) -> bool:
    """Every number the sentence gives a unit is written with that unit in the source."""
    written = quantities(source)
    return all((number, unit) in written for number, unit in quantities(sentence) if unit)


def best_quote(sentence: str, chunk: ScoredChunk) -> tuple[str, int, int]:
    """The source sentence sharing most words with the answer sentence, with its span."""
    words = content_words(sentence)
    pieces = sentence_spans(chunk.text) or [(chunk.text, 0, len(chunk.text))]
    piece, start, end = max(pieces, key=lambda p: len(words & content_words(p[0])))
    return piece, chunk.start + start, chunk.start + end


class CitationChecker:
    def __init__(self, threshold: float, strict: bool = True) -> None:
        self.threshold = threshold
        self.strict = strict

    def check(
        self, text: str, question: str, sources: list[PromptSource]
    ) -> tuple[str, list[Citation], bool]:
        """The answer with only supported [n] markers, the citations they stand for, and
        whether every sentence of it is supported."""
        by_n = {s.n: s.chunk for s in sources}
        cited: dict[int, Citation] = {}
        sentences = []
        every_sentence = True
        for match in SENTENCE.finditer(text):
            raw = match.group()
            plain = CITATION.sub("", raw).strip()
            if not plain:
                continue
            markers = [int(n) for n in CITATION.findall(raw)]
            supported = self.supporters(plain, markers, question, by_n)
            for n, score in supported:
                if n not in cited or cited[n].support < score:
                    cited[n] = citation(n, by_n[n], plain, score)
            every_sentence = every_sentence and bool(supported)
            marks = "".join(f" [{n}]" for n, _ in supported)
            sentences.append(_with_marks(plain, marks))
        answer = " ".join(sentences).strip()
        return answer, sorted(cited.values(), key=lambda c: c.n), every_sentence and bool(cited)

    def supporters(
        self, plain: str, markers: list[int], question: str, by_n: dict[int, ScoredChunk]
    ) -> list[tuple[int, float]]:
        """The sources (number, score) that support a sentence: among those it cites when it
        cites any of them, else the single best of all (post-hoc attribution)."""
        candidates = [n for n in dict.fromkeys(markers) if n in by_n] or list(by_n)
        scores = [support_score(plain, question, by_n[n], self.strict) for n in candidates]
        supported = [(n, s) for n, s in zip(candidates, scores, strict=True) if s >= self.threshold]
        if markers and not any(n in markers for n, _ in supported):
            return []
        if not markers and supported:
            return [max(supported, key=lambda pair: pair[1])]
        return supported


def citation(n: int, chunk: ScoredChunk, claim: str, score: float) -> Citation:
    """Source n cited for a claim, quoting the source sentence closest to it."""
    quote, start, end = best_quote(claim, chunk)
    return Citation(
        n,
        chunk.doc_id,
        chunk.chunk_id,
        chunk.title,
        start,
        end,
        quote,
        round(score, 3),
        chunk.version,
    )


def _with_marks(sentence: str, marks: str) -> str:
    if marks and sentence[-1:] in ".!?":
        return sentence[:-1] + marks + sentence[-1]
    return sentence + marks
