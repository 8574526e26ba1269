"""POST /v1/rerank and /v1/score: driven by the Cohere SDK and in the Cohere/Jina shape over
httpx; the order equals the answer path's own reranker; limits and refusals."""

import asyncio

import cohere
import httpx
import pytest

from ragserve import SamplingParams
from ragserve.rag.documents import ScoredChunk
from ragserve.rag.rerank import LLMReranker, rerank

MODEL = "smollm2-135m-instruct"
QUERY = "What is the capital of France?"
DOCUMENTS = [
    "Berlin is the capital of Germany.",
    "Paris is the capital and largest city of France.",
    "The Eiffel Tower stands in Paris.",
    "Bananas are rich in potassium.",
]


@pytest.fixture(scope="module")
def key(server):
    return server.key("ranker")


def post(server, key, path: str, body: dict) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(server.url + path, json=body, headers=headers, timeout=120)


@pytest.fixture(scope="module")
def internal_order(server):
    """The answer path's reranker (rag/rerank.py) on the same texts, on an engine of its own."""
    from ragserve import LLM

    llm = LLM(dtype="float32", kv_cache_memory_bytes=2048 * 46080)

    async def generate(token_ids, params: SamplingParams, narrowing=()):
        yield llm.generate({"prompt_token_ids": token_ids}, params)[0]

    chunks = [
        ScoredChunk(str(i), "d", "t", "s", i, 0, len(t), t, 0.0, "r")
        for i, t in enumerate(DOCUMENTS)
    ]
    ranked = asyncio.run(rerank(LLMReranker(llm.get_tokenizer()), QUERY, chunks, generate))
    return [(int(c.chunk_id), c.score) for c in ranked]


def test_rerank_orders_as_the_internal_reranker(server, key, internal_order):
    documents = [DOCUMENTS[0], {"text": DOCUMENTS[1]}, *DOCUMENTS[2:]]
    body = {"model": MODEL, "query": QUERY, "documents": documents, "top_n": 3}
    reply = post(server, key, "/v1/rerank", body)
    assert reply.status_code == 200, reply.text
    results = reply.json()["results"]
    assert [r["index"] for r in results] == [i for i, _ in internal_order][:3]
    for result, (_, expected) in zip(results, internal_order, strict=False):
        assert result["relevance_score"] == pytest.approx(expected, abs=1e-5)
        assert result["document"]["text"] == DOCUMENTS[result["index"]]
    assert reply.json()["usage"]["total_tokens"] > 0
    bare = post(server, key, "/v1/rerank", {**body, "return_documents": False}).json()
    assert all("document" not in r for r in bare["results"])


def test_the_cohere_sdk_reranks(server, key, internal_order):
    client = cohere.ClientV2(api_key=key, base_url=server.url)
    reply = client.rerank(model=MODEL, query=QUERY, documents=DOCUMENTS, top_n=2)
    assert [r.index for r in reply.results] == [i for i, _ in internal_order][:2]
    old = cohere.Client(api_key=key, base_url=server.url)
    reply = old.rerank(model=MODEL, query=QUERY, documents=DOCUMENTS, return_documents=True)
    assert [r.index for r in reply.results] == [i for i, _ in internal_order]
    assert reply.results[0].document.text == DOCUMENTS[internal_order[0][0]]


def test_score_pairs_one_text_against_many_or_pairwise(server, key, internal_order):
    one = post(server, key, "/v1/score", {"model": MODEL, "text_1": QUERY, "text_2": DOCUMENTS})
    assert one.status_code == 200, one.text
    scores = [d["score"] for d in one.json()["data"]]
    for index, expected in internal_order:
        assert scores[index] == pytest.approx(expected, abs=1e-5)
    pairwise = post(
        server,
        key,
        "/v1/score",
        {
            "model": MODEL,
            "text_1": [QUERY, "Which fruit has potassium?"],
            "text_2": DOCUMENTS[1::2],
        },
    ).json()
    assert [d["index"] for d in pairwise["data"]] == [0, 1]
    assert pairwise["data"][0]["score"] == pytest.approx(scores[1], abs=1e-5)


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/v1/rerank", {"model": "nope", "query": "q", "documents": ["a"]}, 404, "does not rerank"),
        ("/v1/rerank", {"model": MODEL, "query": "q", "documents": []}, 400, "documents"),
        ("/v1/rerank", {"model": MODEL, "query": "", "documents": ["a"]}, 400, "query"),
        ("/v1/rerank", {"model": MODEL, "query": "q", "documents": ["a"] * 65}, 400, "at most 64"),
        ("/v1/score", {"model": MODEL, "text_1": ["a", "b"], "text_2": ["c"] * 3}, 400, "text_1"),
    ],
)
def test_refusals_name_the_reason(server, key, path, body, status, words):
    reply = post(server, key, path, body)
    assert reply.status_code == status, reply.text
    assert words in reply.json()["error"]["message"]


def test_langchain_cohere_rerank_against_this_server(server, key, internal_order):
    from langchain_cohere import CohereRerank
    from langchain_core.documents import Document

    reranker = CohereRerank(cohere_api_key=key, base_url=server.url, model=MODEL, top_n=2)
    kept = reranker.compress_documents([Document(page_content=d) for d in DOCUMENTS], QUERY)
    assert [d.page_content for d in kept] == [DOCUMENTS[i] for i, _ in internal_order][:2]
    assert kept[0].metadata["relevance_score"] == pytest.approx(internal_order[0][1], abs=1e-5)
