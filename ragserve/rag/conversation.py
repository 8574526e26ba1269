"""Follow-up questions: a conversation's last question rewritten as a standalone query.

Only the user's own earlier questions are read. Assistant turns quote evidence, which the user
may no longer be allowed to read (a permission can change between turns); the query is then
run through the access filter of this turn like any other, so nothing an earlier turn
retrieved reaches this one unless the user may read it now.

A question is a follow-up when it leans on what came before: it opens with a connective ("And
what about Finland?", "How about September?"), it points back with a pronoun ("When is it
due?", "How many of them...?"), or it is too short to stand alone. A follow-up is read after
the earlier questions (most recent first), less the names, codes and numbers that its own
replace ("the per diem for Sweden" + "what about Finland?" asks for Finland, not Sweden).
Only terms of a kind the follow-up gives are taken out: a month for a month, a number for a
number, a name for a name ("CSAT in July" + "how about September?" keeps "CSAT").
The rewrite is for retrieval and evidence selection; the answer still quotes or cites the
permitted sources only.

A turn is read (read_turn) as that query, plus what evidence selection ranks apart: each
part of a question that asks two things ("..., and who signs off?"), read after the parts
before it, and, for a follow-up, its own words and the earlier question as it was read. The
earlier question's best sentence answered that turn; when it is also the follow-up's best, the
follow-up's own words find what is new ("How long must my password be?" then "And what should
I use as the second factor?" must not stop at the password sentence). Too few of them to rank
by, they still say what the next sentence must name: "How much is an extra seat?" then "And a
dedicated runner?" asks for a sentence that names a dedicated runner.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ragserve.rag.question import SPECIFIC, question_parts, specific_kind
from ragserve.rag.text import stems

# The user's earlier questions read with a follow-up.
EARLIER_TURNS = 2
# A question with fewer content words than this cannot stand alone.
STANDALONE_MIN_WORDS = 2
# A follow-up's own words rank evidence apart only with at least this many content words
# ("How about September?" and "And once it's over?" say too little alone).
OWN_MIN_WORDS = 3
CONNECTIVE = re.compile(r"^\s*(and|but|also|so|then|what about|how about|what if|if)\b", re.I)
POINTS_BACK = re.compile(
    r"\b(it|its|they|them|their|that|those|these|this|there|he|she|him|his|her|"
    r"afterwards|once|one|ones)\b",
    re.IGNORECASE,
)


def is_follow_up(question: str) -> bool:
    return bool(
        CONNECTIVE.search(question)
        or POINTS_BACK.search(question)
        or len(stems(question)) < STANDALONE_MIN_WORDS
    )


def standalone_query(question: str, history: Sequence[str] = ()) -> str:
    """The question as retrieval should read it, given the user's earlier questions (oldest
    first)."""
    earlier = [turn.strip() for turn in history if turn.strip()][-EARLIER_TURNS:]
    if not earlier or not is_follow_up(question):
        return question
    replaced = {specific_kind(term) for term in SPECIFIC.findall(question)}

    def without_replaced(turn: str) -> str:
        return SPECIFIC.sub(
            lambda m: " " if specific_kind(m.group()) in replaced else m.group(), turn
        )

    context = [without_replaced(turn) for turn in reversed(earlier)]
    return " ".join([question.strip(), *(" ".join(turn.split()) for turn in context)])


@dataclass(frozen=True)
class Reading:
    """How one turn is read: the query retrieval runs; each part of a question that asks more
    than one thing, read after the parts before it (none for a question that asks one); and,
    when this turn follows up on the earlier one, the follow-up's own words (when they are
    enough to rank by) and the earlier question as that turn read it."""

    query: str
    parts: tuple[str, ...] = ()
    own: str | None = None
    earlier: str | None = None
    # The follow-up as asked (None for a question that stands alone).
    follow_up: str | None = None

    @property
    def questions(self) -> list[str]:
        """What evidence is ranked for: the query, the parts, the follow-up's own words, the
        earlier question (those present, in this order)."""
        return [self.query, *self.parts, *(q for q in (self.own, self.earlier) if q)]

    @property
    def new_words(self) -> frozenset[str]:
        """The follow-up's content words (stems) that the earlier question lacks: what it asks
        anew ("And a dedicated runner?" after "How much is an extra seat?")."""
        if self.follow_up is None or self.earlier is None:
            return frozenset()
        return frozenset(stems(self.follow_up) - stems(self.earlier))


def read_turn(question: str, history: Sequence[str] = ()) -> Reading:
    """How the answer path reads the question, given the user's earlier questions (oldest
    first)."""
    turns = [turn.strip() for turn in history if turn.strip()]
    query = standalone_query(question, turns)
    asked = question_parts(question)
    parts = ()
    if len(asked) > 1:
        parts = tuple(
            standalone_query(part, [*turns, *asked[:place]]) for place, part in enumerate(asked)
        )
    if query == question:
        return Reading(query, parts)
    own = question if len(stems(question)) >= OWN_MIN_WORDS else None
    return Reading(query, parts, own, standalone_query(turns[-1], turns[:-1]), question)
