import asyncio
import math

from ragserve.engine.outputs import CompletionOutput
from ragserve.rag.documents import ScoredChunk
from ragserve.rag.rerank import LLMReranker


def test_llm_reranker_orders_by_the_models_yes_probability(llm_fp32):
    tokenizer = llm_fp32.get_tokenizer()
    reranker = LLMReranker(tokenizer)
    yes, no = min(reranker.yes_ids), min(reranker.no_ids)
    chunks = [
        ScoredChunk(f"c{i}", f"d{i}", "t", "s", 0, 0, 10, text, 1.0 - i / 10)
        for i, text in enumerate(["Paris is in Italy.", "Paris is the capital of France."])
    ]

    async def generate(token_ids, params):
        prompt = tokenizer.decode(token_ids)
        p_yes = 0.9 if "Paris is the capital" in prompt else 0.2
        yield CompletionOutput(
            0, "", [yes], "length", logprobs=[{yes: math.log(p_yes), no: math.log(1 - p_yes)}]
        )

    ranked = asyncio.run(reranker.rerank("What is the capital of France?", chunks, generate))
    assert [c.chunk_id for c in ranked] == ["c1", "c0"]
    assert ranked[0].score == 0.9 and abs(ranked[1].score - 0.2) < 1e-9
