"""Hybrid retrieval: BM25 and dense search fused by reciprocal rank fusion (RRF).

The access filter is the reader's, built from the authenticated principal by the caller, and is
applied by the store inside both queries. Nothing a request carries can replace it.

A chunk is a token window, so its first and last sentences may be cut at its edges. For reading
evidence, whole_sentences widens each retrieved chunk to whole sentences with the text of its
neighbouring chunks of the same document version (read through the same access filter), so a
sentence cut by a chunk's edge ("... using ultrasound is" / "called obstetric ultrasonography,
and ...") can be quoted whole.
"""

from collections.abc import Iterable
from dataclasses import dataclass, replace

from ragserve.rag.conversation import Reading
from ragserve.rag.documents import AccessFilter, ScoredChunk, document_text
from ragserve.rag.embeddings import Embedder
from ragserve.rag.headings import heading_above
from ragserve.rag.sentences import sentence_spans
from ragserve.rag.store import Store
from ragserve.rag.text import stems

RRF_K = 60
# How far past a chunk's edge a cut sentence is completed, in characters.
WIDEN_CHARS = 400
# How far above a chunk its heading is looked for (about a page).
HEADING_LOOKBACK_CHARS = 4000


@dataclass
class RetrievalSettings:
    top_k: int = 5
    # Candidates taken from each of BM25 and dense search before fusion.
    candidates: int = 30
    rrf_k: int = RRF_K


@dataclass
class Retrieval:
    chunks: list[ScoredChunk]
    # Cosine similarity of the closest permitted chunk: RRF scores only rank, this measures how
    # close the evidence is (one of answerability's signals).
    best_similarity: float


def reciprocal_rank_fusion(
    rankings: list[list[ScoredChunk]], rrf_k: int = RRF_K
) -> list[ScoredChunk]:
    """Fuse rankings; each chunk's score becomes sum(1 / (rrf_k + rank))."""
    fused: dict[str, ScoredChunk] = {}
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, chunk in enumerate(ranking, start=1):
            fused.setdefault(chunk.chunk_id, chunk)
            scores[chunk.chunk_id] = scores.get(chunk.chunk_id, 0.0) + 1.0 / (rrf_k + rank)
    ordered = sorted(scores, key=lambda c: -scores[c])
    return [ScoredChunk(**{**fused[c].__dict__, "score": scores[c]}) for c in ordered]


class Retriever:
    def __init__(self, store: Store, embedder: Embedder, settings: RetrievalSettings) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings

    def keyword(self, access: AccessFilter, query: str, k: int) -> list[ScoredChunk]:
        return self.store.keyword_search(access, query, k)

    def dense(self, access: AccessFilter, query: str, k: int) -> list[ScoredChunk]:
        vector = self.embedder.embed([query])[0]
        return self.store.vector_search(access, vector, k)

    def retrieve(self, access: AccessFilter, query: str, k: int | None = None) -> Retrieval:
        """The top k permitted chunks, each with its document's readers_digest: looked up after
        the search, so a document whose ACL changed since is salted by its new readers, and
        one the reader lost in between is dropped."""
        k = k or self.settings.top_k
        n = max(self.settings.candidates, k)
        dense = self.dense(access, query, n)
        fused = reciprocal_rank_fusion([self.keyword(access, query, n), dense], self.settings.rrf_k)
        readers: dict[str, str] = {}
        for doc_id in dict.fromkeys(c.doc_id for c in fused[:k]):
            document = self.store.get_document(access, doc_id)
            if document is not None:
                readers[doc_id] = document.readers_digest()
        chunks = [replace(c, readers=readers[c.doc_id]) for c in fused[:k] if c.doc_id in readers]
        return Retrieval(chunks, dense[0].score if dense else 0.0)

    def retrieve_turn(
        self, access: AccessFilter, reading: Reading, k: int | None = None
    ) -> Retrieval:
        """The chunks for a turn's query. A follow-up that names something new ("And a
        dedicated runner?" after "How much is an extra seat?") is read with the earlier
        question, whose words may then outrank its own: when no chunk names all the new
        words, the chunks that do among those found for the follow-up as asked come after."""
        retrieval = self.retrieve(access, reading.query, k)
        new = reading.new_words
        if not new or reading.follow_up is None or any(_names(c, new) for c in retrieval.chunks):
            return retrieval
        found = {c.chunk_id for c in retrieval.chunks}
        extra = self.retrieve(access, reading.follow_up, k).chunks
        naming = [c for c in extra if c.chunk_id not in found and _names(c, new)]
        return replace(retrieval, chunks=retrieval.chunks + naming)

    def hybrid(self, access: AccessFilter, query: str, k: int | None = None) -> list[ScoredChunk]:
        return self.retrieve(access, query, k).chunks

    def documents(self, access: AccessFilter, doc_ids: Iterable[str]) -> list[list[ScoredChunk]]:
        """Every chunk the reader may read of each of the documents (each named once)."""
        return [self.store.document_chunks(access, doc_id) for doc_id in dict.fromkeys(doc_ids)]

    def whole_sentences(self, access: AccessFilter, chunks: list[ScoredChunk]) -> list[ScoredChunk]:
        """The chunks, each widened to whole sentences where its edges cut one (its span and
        text still exactly the document's) and given the heading it starts under."""
        doc_ids = [chunk.doc_id for chunk in chunks]
        neighbours = dict(zip(dict.fromkeys(doc_ids), self.documents(access, doc_ids), strict=True))
        whole = []
        for chunk in chunks:
            document = neighbours[chunk.doc_id]
            widened = _widened(chunk, document)
            whole.append(replace(widened, heading=_heading(widened, document)))
        return whole


def _heading(chunk: ScoredChunk, document: list[ScoredChunk]) -> str:
    """The heading the chunk starts under, from the text of its document within the heading
    look-back above it (not the whole document: documents may be long)."""
    start = max(0, chunk.start - HEADING_LOOKBACK_CHARS)
    above = [
        other
        for other in document
        if other.version == chunk.version and other.start < chunk.start and other.end > start
    ]
    return heading_above(document_text(above, start), chunk.start - start, chunk.title)


def _names(chunk: ScoredChunk, words: frozenset[str]) -> bool:
    return words <= stems(f"{chunk.title} {chunk.text}")


def _widened(chunk: ScoredChunk, document: list[ScoredChunk]) -> ScoredChunk:
    """The chunk with the sentences cut at its edges completed from the chunks that overlap or
    touch it."""
    known = {chunk.start + i: c for i, c in enumerate(chunk.text)}
    for other in document:
        if other.version == chunk.version and other.start <= chunk.end and other.end >= chunk.start:
            known.update((other.start + i, c) for i, c in enumerate(other.text))
    low, high = chunk.start, chunk.end
    while low - 1 in known and chunk.start - low < WIDEN_CHARS:
        low -= 1
    while high in known and high - chunk.end < WIDEN_CHARS:
        high += 1
    region = "".join(known[i] for i in range(low, high))
    start, end = chunk.start, chunk.end
    for _, first, last in sentence_spans(region):
        if low + first < chunk.start < low + last:
            start = low + first
        if low + first < chunk.end < low + last:
            end = low + last
    if (start, end) == (chunk.start, chunk.end):
        return chunk
    return replace(chunk, start=start, end=end, text=region[start - low : end - low])
