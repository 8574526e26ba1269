"""Lists as answers: "What ingredients are in the fish soup?" answered by the list under
"Ingredients", not by its one item that reads closest.

Sentence ranking picks single lines, and a list's items each state a part of the answer. So
when an answer's sentence is a bulleted item under a heading that the question names in full
("ingredients", "what to bring on the first day"), the answer is that list: the run of items
around it, in document order, each quoted and cited. Only items among the evidence are
quoted (what the reader may read, in the retrieved chunks and the sentences they cut), and a
run ends where anything else stands between two items.
"""

from ragserve.rag.evidence import Sentence
from ragserve.rag.headings import LIST_ITEM
from ragserve.rag.text import stems

# A longer list is cut after this many items: a quote is not the whole document.
LIST_MAX_ITEMS = 12
# What may stand between two items of one run: line breaks and indents, as in "\n\n- ".
ITEM_GAP_CHARS = 3


def whole_list(query: str, chosen: list[Sentence], ranked: list[Sentence]) -> list[Sentence]:
    """The items of the list the question names by its heading, when a chosen sentence is one
    of them; else the chosen sentences."""
    asked = stems(query)
    for sentence in chosen:
        heading = stems(sentence.section)
        named = bool(heading) and heading <= asked and sentence.section != sentence.chunk.title
        if named and LIST_ITEM.match(sentence.text):
            items = _run(sentence, ranked)
            if len(items) > 1:
                # From the list's start, or up to the item when it lies further down.
                first = max(0, [s.start for s in items].index(sentence.start) + 1 - LIST_MAX_ITEMS)
                return items[first : first + LIST_MAX_ITEMS]
    return chosen


def is_list(sentences: list[Sentence]) -> bool:
    """Whether the sentences are items of one list (a list answer): quoted as they stand, since
    each states a part of the answer and none needs combining with another."""
    return len(sentences) > 1 and all(_item_beside(sentences[0], s) for s in sentences)


def _item_beside(item: Sentence, other: Sentence) -> bool:
    """Whether other is a list item under the same heading of item's document."""
    return (
        LIST_ITEM.match(other.text) is not None
        and other.chunk.doc_id == item.chunk.doc_id
        and other.section == item.section
    )


def _run(item: Sentence, ranked: list[Sentence]) -> list[Sentence]:
    """The items next to one another around item, in document order."""
    siblings = sorted((s for s in ranked if _item_beside(item, s)), key=lambda s: s.start)
    place = next(i for i, s in enumerate(siblings) if s.start == item.start)
    first = last = place
    while first > 0 and siblings[first].start - siblings[first - 1].end <= ITEM_GAP_CHARS:
        first -= 1
    while (
        last + 1 < len(siblings) and siblings[last + 1].start - siblings[last].end <= ITEM_GAP_CHARS
    ):
        last += 1
    return siblings[first : last + 1]
