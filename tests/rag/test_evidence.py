"""Evidence sentences ranked for several questions at once."""

import pytest

from ragserve.rag.documents import ScoredChunk
from ragserve.rag.evidence import EvidenceSelector, unmatched_words
from ragserve.rag.text import stems

TEXT = (
    "The depot opens at 06:00 on weekdays. Forklift drivers must hold a valid licence. "
    "The night shift starts on 5 May 2025. Six drivers will be hired for it."
)


def chunk() -> ScoredChunk:
    return ScoredChunk("c1", "depot", "Depot rules", "depot.txt", 0, 0, len(TEXT), TEXT, 1.0)


def test_ranking_several_questions_at_once_ranks_each_as_alone(embedder):
    selector = EvidenceSelector(embedder)
    questions = ["When does the night shift start?", "How many drivers will be hired?"]
    together = selector.rank_each(questions, [chunk()])
    for question, ranked in zip(questions, together, strict=True):
        alone = selector.rank(question, [chunk()])
        assert [s.text for s in ranked] == [s.text for s in alone]
        assert [s.score for s in ranked] == pytest.approx([s.score for s in alone], abs=1e-5)
    assert together[0][0].text.startswith("The night shift starts")
    assert together[1][0].text.startswith("Six drivers")


def test_no_candidates_give_an_empty_ranking_per_question(embedder):
    assert EvidenceSelector(embedder).rank_each(["a?", "b?"], []) == [[], []]


def document(text: str) -> ScoredChunk:
    return ScoredChunk("c2", "notes", "Release notes", "notes.txt", 0, 0, len(text), text, 1.0)


def test_a_dated_heading_is_evidence_and_an_undated_one_only_a_section(embedder):
    text = (
        "Conductor 4.9 — released 25 February 2025\n\n"
        "New\n"
        "  * Concurrency policies decide what happens when a run is still going.\n"
    )
    ranked = EvidenceSelector(embedder).rank("When did Conductor 4.9 come out?", [document(text)])
    assert ranked[0].text == "Conductor 4.9 — released 25 February 2025"
    assert "New" not in [s.text for s in ranked]
    assert ranked[-1].section == "New"


def test_a_line_with_leader_dots_is_evidence_under_its_heading(embedder):
    text = (
        "SCHEDULE OF LIMITS\n"
        "  Contents sum insured ................ GBP 45,000\n"
        "  Escape of water excess .............. GBP 350\n"
    )
    ranked = EvidenceSelector(embedder).rank(
        "What is the escape of water excess?", [document(text)]
    )
    assert ranked[0].text == "Escape of water excess .............. GBP 350"
    assert [s.section for s in ranked] == ["SCHEDULE OF LIMITS"] * 2


def test_the_row_of_the_plan_the_question_names_outranks_a_row_that_lists_it(embedder):
    text = (
        "Add-on: Log retention | Price (GBP per month): 90 | Available on: Business, Enterprise\n"
        "Plan: Team | Monthly price (GBP): 149 | Seats: 10\n"
        "Plan: Business | Monthly price (GBP): 499 | Seats: 25\n"
    )
    ranked = EvidenceSelector(embedder).rank(
        "What does the Business plan cost per month?", [document(text)]
    )
    assert ranked[0].text.startswith("Plan: Business")


FAQ = (
    "What is the per diem for domestic travel?\n"
    "The daily meal allowance for domestic travel is 450 NOK.\n\n"
    "Can I fly business class?\n"
    "Business class always needs written approval from the finance director.\n"
)


def test_an_faq_question_asked_again_lends_its_answer_its_closeness(embedder):
    selector = EvidenceSelector(embedder)
    asked = selector.rank("What is the per diem for domestic travel?", [document(FAQ)])
    answer = next(s for s in asked if s.text.startswith("The daily meal allowance"))
    alone = selector.embedder.embed(["What is the per diem for domestic travel?", answer.text])
    assert answer.section == "What is the per diem for domestic travel?"
    assert answer.similarity == pytest.approx(1.0, abs=1e-5)
    assert answer.similarity > float(alone[0] @ alone[1]) + 0.2
    # A question with a word the FAQ's question lacks is another question: the sentence is
    # read alone.
    other = selector.rank("What is the per diem for travel to Russia?", [document(FAQ)])
    answer = next(s for s in other if s.text.startswith("The daily meal allowance"))
    alone = selector.embedder.embed(["What is the per diem for travel to Russia?", answer.text])
    assert answer.similarity == pytest.approx(float(alone[0] @ alone[1]), abs=1e-5)


def test_list_items_and_short_lines_with_a_number_are_evidence(embedder):
    text = (
        "## Fish soup\n\nServes 4.\n\n### Ingredients\n\n- 600 g cod fillet\n- 2 dl cream\n\n1.\n"
    )
    ranked = EvidenceSelector(embedder).rank("How much cream goes into the soup?", [document(text)])
    texts = [s.text for s in ranked]
    assert ranked[0].text == "- 2 dl cream" and ranked[0].section == "Ingredients"
    assert "Serves 4." in texts
    # A heading is a section, and a bare list number states nothing.
    assert not {"## Fish soup", "### Ingredients", "1."} & set(texts)


def test_unmatched_words_are_what_the_question_asks_beyond_the_text():
    general = "Subutai was a general of Genghis Khan."
    assert unmatched_words("Who was the father of Subutai?", general) == "who was the father of"
    assert unmatched_words("Who was Subutai?", general) == ""
    # What a "how" measures is the kind of answer, which a number states without the word.
    warranty = "Warranty: the battery is covered for 2 years."
    assert unmatched_words("How long is the battery warranty?", warranty) == ""
    assert unmatched_words("How long is the motor warranty?", warranty) == "how is the motor"


def test_a_word_with_letters_beyond_ascii_is_one_word():
    # "kākāpō" was read as "k", "k" and "p", so no sentence could lack it.
    kiwi = "Kiwi are flightless birds endemic to New Zealand."
    lacking = unmatched_words("What is the genus of the kākāpō?", kiwi)
    assert lacking == "what is the genus of the kākāpō"
    assert stems("Ögedei Khan met in Brattørkaia") == {"ogedei", "khan", "met", "brattørkaia"}


def test_a_sentence_on_the_relation_asked_comes_closer_than_one_on_the_entity_only(reader):
    selector = EvidenceSelector(reader)
    question = "Who was the father of Subutai?"
    entity_only = "Subutai directed more than twenty campaigns and won sixty-five battles."
    relation = "Subutai's father, Jarchigudai, was a blacksmith who brought him to Temüjin."
    unmatched = [
        selector.unmatched_similarity(question, selector.rank(question, [document(text)]))
        for text in (entity_only, relation)
    ]
    assert unmatched[0] < 0.5 < unmatched[1]
    assert selector.unmatched_similarity(question, []) == 0.0
