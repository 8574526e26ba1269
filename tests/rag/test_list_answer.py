"""A list the question names by its heading is the answer, item by item."""

from ragserve.rag.documents import ScoredChunk
from ragserve.rag.evidence import EvidenceSelector
from ragserve.rag.list_answer import LIST_MAX_ITEMS, whole_list

RECIPES = (
    "## Fish soup\n\n"
    "Serves 4. The soup must not boil once the fish is in.\n\n"
    "### Ingredients\n\n"
    "- 600 g cod fillet\n"
    "- 1 litre fish stock\n"
    "- 2 dl cream\n\n"
    "### Method\n\n"
    "- Simmer the stock for 5 minutes.\n"
    "- Add the fish and poach it for 4 minutes.\n"
)


def chunk(text: str = RECIPES) -> ScoredChunk:
    return ScoredChunk("c1", "recipes", "Recipes", "recipes.md", 0, 0, len(text), text, 1.0)


def test_an_item_under_the_heading_the_question_names_brings_its_list(embedder):
    question = "What ingredients are in the fish soup?"
    ranked = EvidenceSelector(embedder).rank(question, [chunk()])
    cream = next(s for s in ranked if "cream" in s.text)
    items = whole_list(question, [ranked[0], cream], ranked)
    # The list alone, in document order, and nothing from the method's list.
    assert [s.text for s in items] == ["- 600 g cod fillet", "- 1 litre fish stock", "- 2 dl cream"]
    assert all(RECIPES[s.start : s.end] == s.text for s in items)


def test_other_answers_keep_their_sentences(embedder):
    selector = EvidenceSelector(embedder)
    # The heading is not named: one item answers.
    question = "How much cream goes into the soup?"
    ranked = selector.rank(question, [chunk()])
    assert whole_list(question, ranked[:1], ranked) == ranked[:1]
    # A list of one item is no list.
    single = "### Ingredients\n\n- 600 g cod fillet\n\nServe hot."
    question = "What ingredients does it take?"
    ranked = selector.rank(question, [chunk(single)])
    assert whole_list(question, ranked[:2], ranked) == ranked[:2]


def test_a_long_list_is_cut(embedder):
    text = "### Packing list\n\n" + "\n".join(f"- item number {n}" for n in range(30))
    question = "What is on the packing list?"
    ranked = EvidenceSelector(embedder).rank(question, [chunk(text)])
    items = whole_list(question, ranked[:1], ranked)
    assert len(items) == LIST_MAX_ITEMS
    assert [s.start for s in items] == sorted(s.start for s in items)
    # An item further down than the cut stays in the answer.
    far = next(s for s in ranked if s.text == "- item number 25")
    items = whole_list(question, [far], ranked)
    assert len(items) == LIST_MAX_ITEMS and items[-1] == far
