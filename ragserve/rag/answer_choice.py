"""The answer's sentences: which of the ranked evidence sentences an answer is made of.

The best sentence for each part of a two-part question, or the best one; then a close second,
and any near the best that covers words of the question the chosen ones leave open. A
follow-up whose best sentence is also the earlier question's best may hold only the earlier
answer ("How long must my password be?", then "And what should I use as the second factor?"),
so the best sentence for the follow-up's own words comes too; when they are too few to rank
by, the next best of those that name all the words the follow-up adds ("And a dedicated
runner?"). An item of a list that the question names by its heading brings the list
(list_answer.py). Quoted, a sentence that opens by pointing back ("That player wins.") comes
after the sentence of its paragraph it points to, which alone says what "that player" is.
"""

import re
from typing import Protocol

from ragserve.rag.conversation import Reading
from ragserve.rag.evidence import Sentence
from ragserve.rag.list_answer import whole_list
from ragserve.rag.text import stems

# A sentence's first word that refers to something an earlier sentence named.
POINTS_BACK = re.compile(r"(?:It|Its|This|That|These|Those|They|Their|He|His|She|Her|Such)\b")


class ChoiceSettings(Protocol):
    """What the choice reads of the answer settings (AnswerSettings holds them)."""

    # A second sentence joins when its score is within this of the best ...
    quote_margin: float
    # ... and one within this that covers words of the question the others leave open.
    cover_margin: float
    # At most this many sentences an answer (a list named by its heading aside).
    answer_sentences: int


def choose(
    reading: Reading, rankings: list[list[Sentence]], settings: ChoiceSettings
) -> list[Sentence]:
    """The answer's sentences, from the evidence ranked for each of reading.questions (in that
    order; rankings[0], the query's, is not empty)."""
    ranked, parts = rankings[0], rankings[1 : 1 + len(reading.parts)]
    best = ranked[0]
    if reading.earlier and rankings[-1] and _key(rankings[-1][0]) == _key(best):
        parts = [ranked, rankings[-2] if reading.own else _naming(ranked, reading.new_words)]
    chosen: list[Sentence] = []
    for ranking in parts:
        picked = next((s for s in ranking if _key(s) not in map(_key, chosen)), None)
        if picked is not None and len(chosen) < settings.answer_sentences:
            chosen.append(picked)
    chosen = chosen or [best]
    asked = stems(reading.query)
    covered = set().union(*(asked & stems(s.context) for s in chosen))
    for sentence in ranked:
        if len(chosen) >= settings.answer_sentences:
            break
        if _key(sentence) in map(_key, chosen):
            continue
        behind = best.score - sentence.score
        adds = (asked & stems(sentence.context)) - covered
        if behind <= settings.quote_margin or (adds and behind <= settings.cover_margin):
            chosen.append(sentence)
            covered |= adds
    if settings.answer_sentences > 1:
        return whole_list(reading.query, chosen, ranked)
    return chosen


def with_antecedents(chosen: list[Sentence], ranked: list[Sentence]) -> list[Sentence]:
    """The chosen sentences to quote, each that points back after the sentence before it (the
    chosen ones stay what a generated answer must rest on)."""
    complete: list[Sentence] = []
    for sentence in chosen:
        before = _before(sentence, ranked) if POINTS_BACK.match(sentence.text) else None
        if before is not None and _key(before) not in map(_key, [*chosen, *complete]):
            complete.append(before)
        complete.append(sentence)
    return complete


def _before(sentence: Sentence, ranked: list[Sentence]) -> Sentence | None:
    """The candidate sentence just before this one in its chunk's paragraph, if any."""
    chunk = sentence.chunk
    for other in ranked:
        if other.chunk.doc_id != chunk.doc_id or not chunk.start <= other.start < sentence.start:
            continue
        between = chunk.text[other.end - chunk.start : sentence.start - chunk.start]
        if not between.strip() and "\n\n" not in between:
            return other
    return None


def _naming(ranked: list[Sentence], words: frozenset[str]) -> list[Sentence]:
    """The sentences after the best, those whose context holds all the words first (some of
    them alone may be anywhere: "once" of "And once it's over?")."""
    return sorted(ranked[1:], key=lambda s: not words <= stems(s.context))


def _key(sentence: Sentence) -> tuple[str, int]:
    return sentence.chunk.doc_id, sentence.start
