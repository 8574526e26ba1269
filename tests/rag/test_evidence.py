"""Evidence sentences ranked for several questions at once."""

import pytest

from ragserve.rag.documents import ScoredChunk
from ragserve.rag.evidence import EvidenceSelector

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
