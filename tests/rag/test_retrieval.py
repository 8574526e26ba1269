from ragserve.rag.conversation import read_turn
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


def test_a_chunk_that_starts_below_a_heading_is_given_it(embedder, tmp_path):
    refunds = " ".join(f"Refund rule {n} applies to orders of type {n}." for n in range(10))
    text = f"# Shop policy\n\n## Refunds\n\n{refunds}\n\n## Delivery\n\nParcels ship on Mondays."
    store = SqliteStore(tmp_path / "index.sqlite", embedder.dimension)
    ingestor = Ingestor(store, embedder, chunk_size=24, chunk_overlap=4)
    acl = Acl.of(groups=["staff"])
    assert ingestor.ingest(SourceDocument("policy.md", text.encode()), "acme", "root", acl).ok
    staff = AccessFilter("acme", "sue", ("staff",))
    retriever = Retriever(store, embedder, RetrievalSettings())
    (doc,) = store.list_documents(staff)
    whole = retriever.whole_sentences(staff, store.document_chunks(staff, doc.doc_id))
    inside = [c for c in whole if c.text.startswith("Refund rule") and "rule 0 " not in c.text]
    assert inside and all(c.heading == "Refunds" for c in inside)
    assert [c.heading for c in whole if c.text.startswith("Parcels")] in ([], ["Delivery"])
    store.close()


def test_a_follow_up_naming_something_new_gets_a_chunk_that_names_it(embedder, tmp_path):
    # Read with the earlier question, "And a dedicated runner?" ranks the seat's chunk first:
    # the earlier question has more words. A chunk that names the runner must come too.
    store = SqliteStore(tmp_path / "index.sqlite", embedder.dimension)
    ingestor = Ingestor(store, embedder)
    for name, text in (
        ("seats.txt", "An extra seat costs 12 GBP per month. Seats are named users."),
        ("seat-policy.txt", "Each extra seat is billed per month from the day it is added."),
        (
            "hardware.txt",
            "Hardware options. Builds run on shared machines in the workspace's region unless "
            "the team books its own. Logs are kept for 30 days and artefacts for 7 days. "
            "A dedicated runner has 4 vCPU and 16 GB of memory and is billed at 240 GBP. "
            "Machines are patched every Sunday night and restarted in turn.",
        ),
    ):
        document = SourceDocument(name, text.encode())
        assert ingestor.ingest(document, "acme", "root", Acl.of(groups=["staff"])).ok
    staff = AccessFilter("acme", "sue", ("staff",))
    retriever = Retriever(store, embedder, RetrievalSettings(top_k=1))
    history = ["How much is an extra seat per month?"]
    reading = read_turn("And a dedicated runner?", history)
    plain = retriever.retrieve(staff, reading.query).chunks
    assert ["runner" not in c.text for c in plain] == [True]
    turn = retriever.retrieve_turn(staff, reading).chunks
    assert turn[0] == plain[0] and any("dedicated runner" in c.text for c in turn[1:])
    # A question that stands alone, or one whose new words a chunk found already names, gets
    # what retrieve gives.
    alone = read_turn("How much is an extra seat per month?")
    assert (
        retriever.retrieve_turn(staff, alone).chunks
        == retriever.retrieve(staff, alone.query).chunks
    )
    named = read_turn("And are seats named users?", history)
    assert (
        retriever.retrieve_turn(staff, named).chunks
        == retriever.retrieve(staff, named.query).chunks
    )
    # Who may not read a document gets nothing of it on a follow-up either.
    stranger = AccessFilter("acme", "bob", ("visitors",))
    assert retriever.retrieve_turn(stranger, reading).chunks == []
    store.close()
