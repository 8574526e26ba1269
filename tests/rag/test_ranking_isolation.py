"""A reader's scores and order depend on what that reader may read and on nothing else: documents
of another group, another user or another tenant change no score, rank or result, in either
store (DESIGN.md §6). Full-text engines compute BM25's statistics over the whole index; an
RRF score then gives away the keyword rank, and with it whether a hidden document holds a word.
"""

import uuid
from dataclasses import astuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragserve.rag.documents import AccessFilter, Acl
from ragserve.rag.keyword import bm25_top, query_terms, term_counts
from ragserve.rag.retrieval import RetrievalSettings, Retriever
from tests.rag.conftest import make_document

WORDS = [
    "zorblax", "quibbit", "harvest", "valley", "spring", "ledger", "inventory", "report",
    "budget", "deal", "closes", "september", "globex", "bluebird", "120", "river", "north",
]  # fmt: skip


# Embeddings by text, shared by every test here: MiniLM embeds each text once.
VECTORS: dict[str, np.ndarray] = {}


class Corpus:
    """Writes documents with real MiniLM embeddings."""

    def __init__(self, store, embedder) -> None:
        self.store = store
        self.embedder = embedder
        self.vectors = VECTORS

    def add(self, doc_id: str, texts: list[str], owner: str, tenant: str, acl: Acl) -> None:
        missing = [t for t in texts if t not in self.vectors]
        if missing:
            self.vectors.update(zip(missing, self.embedder.embed(missing), strict=True))
        document, chunks = make_document(
            doc_id, texts, [self.vectors[t] for t in texts], owner=owner, tenant=tenant, acl=acl
        )
        self.store.write_document(document, chunks)


def seen_by(store, embedder, reader: AccessFilter, query: str) -> dict[str, list[tuple]]:
    """Everything a reader gets back for a query: keyword, dense and fused results in full."""
    retriever = Retriever(store, embedder, RetrievalSettings(top_k=5, candidates=10))
    vector = embedder.embed([query])[0]
    retrieval = retriever.retrieve(reader, query)
    return {
        "keyword": [astuple(c) for c in store.keyword_search(reader, query, 10)],
        "dense": [astuple(c) for c in store.vector_search(reader, vector, 10)],
        "hybrid": [astuple(c) for c in retrieval.chunks],
        "best_similarity": [(retrieval.best_similarity,)],
    }


def test_hidden_documents_do_not_reorder_a_readers_results(store_factory, embedder):
    """The reproduction: carol's two field notes keep their order and scores while a writer of
    another group and a writer of another tenant stuff the same words into documents she cannot
    read."""
    store = store_factory(embedder.dimension)
    corpus = Corpus(store, embedder)
    staff = Acl.of(groups=["staff"])
    note = "Field notes on {} harvesting in the northern valley during spring."
    corpus.add("x", [note.format("zorblax")], "carol", "default", staff)
    corpus.add("y", [note.format("quibbit")], "carol", "default", staff)
    carol = AccessFilter("default", "carol", ("staff",))
    query = "zorblax quibbit"
    before = seen_by(store, embedder, carol, query)
    assert [row[1] for row in before["hybrid"]] == ["x", "y"]
    corpus.add("d", ["zorblax zorblax zorblax inventory report"], "dave", "default", Acl())
    assert seen_by(store, embedder, carol, query) == before
    corpus.add("e", ["quibbit quibbit quibbit ledger"], "erin", "beta", Acl())
    assert seen_by(store, embedder, carol, query) == before
    # The statistics are the reader's own: dave does see his document's effect.
    dave = AccessFilter("default", "dave", ("eng",))
    assert [c.doc_id for c in store.keyword_search(dave, "zorblax", 5)] == ["d"]


sentences = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
documents = st.lists(sentences, min_size=1, max_size=3)
# Who a hidden document belongs to: the reader's tenant but another group, the reader's tenant
# but another user's own, or another tenant that names the reader's user and group.
hidden_kinds = st.sampled_from(["other_group", "other_user", "other_tenant"])


@pytest.fixture
def two_stores(store_factory, embedder):
    """Opened once for all of a property test's examples; each example takes a new tenant."""
    return store_factory(embedder.dimension), store_factory(embedder.dimension)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    visible=st.lists(documents, min_size=1, max_size=4),
    hidden=st.lists(st.tuples(hidden_kinds, documents, st.integers(0, 4)), max_size=4),
    queries=st.lists(sentences, min_size=1, max_size=3),
)
def test_results_are_identical_with_and_without_hidden_documents(
    two_stores, embedder, visible, hidden, queries
):
    """Two stores hold the same readable documents, written in the same order; one also holds
    hidden ones, written before, between and after them. Everything the reader gets back is
    identical, bit for bit."""
    tenant = f"t{uuid.uuid4().hex[:8]}"
    reader = AccessFilter(tenant, "carol", ("staff",))
    alone, mixed = (Corpus(store, embedder) for store in two_stores)
    staff = Acl.of(groups=["staff"])
    owners = {
        "other_group": (tenant, "dave", Acl.of(groups=["eng"])),
        "other_user": (tenant, "dave", Acl()),
        "other_tenant": (f"{tenant}-beta", "dave", Acl.of(users=["carol"], groups=["staff"])),
    }
    for position in range(len(visible) + 1):
        for n, (kind, texts, at) in enumerate(hidden):
            if min(at, len(visible)) == position:
                hidden_tenant, owner, acl = owners[kind]
                mixed.add(f"hidden-{n}", texts, owner, hidden_tenant, acl)
        if position < len(visible):
            for corpus in (alone, mixed):
                corpus.add(f"doc-{position}", visible[position], "carol", tenant, staff)
    for query in queries:
        assert seen_by(mixed.store, embedder, reader, query) == seen_by(
            alone.store, embedder, reader, query
        )


def test_bm25_counts_only_the_postings_it_is_given():
    """Scores come from the readable chunks' postings and statistics alone; ties go to the
    older chunk."""
    texts = {1: "red apples and red pears", 2: "green apples", 3: "red wine"}
    postings = []
    for key, text in texts.items():
        counts, length = term_counts(text)
        postings += [(t, key, counts[t], length) for t in query_terms("red apples") if t in counts]
    total = sum(term_counts(t)[1] for t in texts.values())
    ranked = bm25_top(postings, len(texts), total, 10)
    assert [key for key, _ in ranked] == [1, 2, 3]
    assert bm25_top([("x", 5, 1, 3), ("x", 4, 1, 3)], 2, 6, 10)[0][0] == 4
    assert query_terms("Running runners' RUN; café") == ["run", "runner", "cafe"]


def test_a_searchs_work_does_not_depend_on_hidden_text(tmp_path):
    """Two SQLite stores hold the same readable documents and as many hidden chunks of the
    same lengths; in one the hidden chunks hold the query's words, in the other not. Both
    searches execute the same number of SQLite instructions (a deterministic stand-in for their
    time), so timing a search tells nothing about what hidden documents say."""
    from ragserve.rag.stores.sqlite import SqliteStore

    reader = AccessFilter("acme", "carol", ("staff",))
    rng = np.random.default_rng(0)
    vectors = [rng.standard_normal(8) for _ in range(100)]
    steps = []
    for hidden_word in ("zorblax", "quibbit"):
        store = SqliteStore(tmp_path / f"{hidden_word}.sqlite", 8)
        for i in range(20):
            texts = [f"zorblax field notes {j}" for j in range(5)]
            store.write_document(
                *make_document(f"v{i}", texts, vectors[:5], "carol", "acme", Acl.of(["carol"]))
            )
        for i in range(20):
            texts = [f"{hidden_word} {hidden_word} ledger {j}" for j in range(100)]
            store.write_document(
                *make_document(f"h{i}", texts, vectors, "dave", "acme", Acl.of(groups=["eng"]))
            )
        count = [0]

        def step(count: list[int] = count) -> int:
            count[0] += 1
            return 0

        store._db.set_progress_handler(step, 1)
        assert [c.doc_id for c in store.keyword_search(reader, "zorblax notes", 3)]
        assert store.vector_search(reader, vectors[0], 3)
        steps.append(count[0])
        store.close()
    assert steps[0] == steps[1]
