from ragserve.rag.documents import ScoredChunk
from ragserve.rag.retrieval import reciprocal_rank_fusion


def chunk(chunk_id: str, score: float = 0.0) -> ScoredChunk:
    return ScoredChunk(chunk_id, "doc", "title", "src", 0, 0, 1, "text", score)


def test_rrf_rewards_agreement_and_ignores_raw_scores():
    keyword = [chunk("a", 900.0), chunk("b", 5.0), chunk("c", 1.0)]
    dense = [chunk("b", 0.9), chunk("c", 0.8), chunk("d", 0.1)]
    fused = reciprocal_rank_fusion([keyword, dense], rrf_k=60)
    assert [c.chunk_id for c in fused] == ["b", "c", "a", "d"]
    assert fused[0].score == 1 / 62 + 1 / 61
    assert fused[2].score == 1 / 61  # a's huge BM25 score counts as rank 1, nothing more


def test_rrf_keeps_the_first_rankings_record_and_handles_empty_rankings():
    fused = reciprocal_rank_fusion([[], [chunk("x", 0.5)]])
    assert [(c.chunk_id, c.title) for c in fused] == [("x", "title")]
    assert reciprocal_rank_fusion([[], []]) == []
