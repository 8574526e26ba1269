from ragserve.rag.documents import AccessFilter, Acl, ScoredChunk
from ragserve.rag.ingest import Ingestor, SourceDocument
from ragserve.rag.retrieval import RetrievalSettings, Retriever, reciprocal_rank_fusion
from ragserve.rag.stores.sqlite import SqliteStore


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


def test_evidence_chunks_are_widened_to_whole_sentences_only_from_readable_text(embedder, tmp_path):
    sentences = [
        f"Rule {n} of the depot says that pallets stay in lane {n} overnight." for n in range(12)
    ]
    text = " ".join(sentences)
    store = SqliteStore(tmp_path / "index.sqlite", embedder.dimension)
    ingestor = Ingestor(store, embedder, chunk_size=24, chunk_overlap=4)
    assert ingestor.ingest(
        SourceDocument("depot.txt", text.encode()), "acme", "root", Acl.of(groups=["staff"])
    ).ok
    staff = AccessFilter("acme", "sue", ("staff",))
    retriever = Retriever(store, embedder, RetrievalSettings())
    (doc,) = store.list_documents(staff)
    chunks = store.document_chunks(staff, doc.doc_id)
    assert len(chunks) > 3 and any(c.text[0].islower() for c in chunks), "edges cut sentences"
    for before, after in zip(chunks, retriever.whole_sentences(staff, chunks), strict=True):
        assert text[after.start : after.end] == after.text
        assert after.start <= before.start and after.end >= before.end
        assert after.text[0].isupper() and after.text.endswith("overnight.")
        assert after.chunk_id == before.chunk_id
    # A reader who may not read the document gets nothing widened from it.
    stranger = AccessFilter("acme", "bob", ("visitors",))
    assert retriever.whole_sentences(stranger, chunks[1:2]) == chunks[1:2]
    store.close()
