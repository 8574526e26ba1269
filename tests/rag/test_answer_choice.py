"""Which evidence sentences a quote answer is made of."""

from ragserve.rag.answer import AnswerSettings
from ragserve.rag.answer_choice import choose, with_antecedents
from ragserve.rag.conversation import read_turn
from ragserve.rag.documents import ScoredChunk
from ragserve.rag.evidence import EvidenceSelector

RULES = (
    "End of the game\n\n"
    "Each turn, a player may buy one ship. The game ends as soon as a player owns 20 gold. "
    "That player wins.\n\n"
    "It is played with two to five players.\n"
)


RULES_CHUNK = ScoredChunk("c1", "rules", "Rules", "rules.txt", 0, 0, len(RULES), RULES, 1.0)


def answer_for(question: str, embedder) -> list[str]:
    reading = read_turn(question)
    rankings = EvidenceSelector(embedder).rank_each(reading.questions, [RULES_CHUNK])
    chosen = choose(reading, rankings, AnswerSettings(answer_sentences=1))
    return [s.text for s in with_antecedents(chosen, rankings[0])]


def test_a_sentence_that_points_back_comes_after_the_one_it_points_to(embedder):
    texts = answer_for("Which player wins?", embedder)
    assert texts == ["The game ends as soon as a player owns 20 gold.", "That player wins."]


def test_a_sentence_that_opens_its_paragraph_comes_alone(embedder):
    # "It" opens a paragraph of its own: the sentence before is another paragraph's.
    assert answer_for("How many players can play?", embedder) == [
        "It is played with two to five players."
    ]


def test_a_sentence_that_names_its_subject_comes_alone(embedder):
    texts = answer_for("How much gold ends the game?", embedder)
    assert texts == ["The game ends as soon as a player owns 20 gold."]
