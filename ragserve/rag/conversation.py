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
The rewrite is for retrieval and evidence selection; the answer still quotes or cites the
permitted sources only.
"""

import re
from collections.abc import Sequence

from ragserve.rag.question import SPECIFIC
from ragserve.rag.text import stems

# The user's earlier questions read with a follow-up.
EARLIER_TURNS = 2
# A question with fewer content words than this cannot stand alone.
STANDALONE_MIN_WORDS = 2
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
    replaced = bool(SPECIFIC.search(question))
    context = []
    for turn in reversed(earlier):
        context.append(SPECIFIC.sub(" ", turn) if replaced else turn)
    return " ".join([question.strip(), *(" ".join(turn.split()) for turn in context)])
