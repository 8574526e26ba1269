import asyncio
import math

from ragserve.engine.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from ragserve.rag.documents import ScoredChunk
from ragserve.rag.rerank import LLMReranker, rerank


def test_llm_reranker_orders_by_the_models_yes_probability(llm_fp32):
    tokenizer = llm_fp32.get_tokenizer()
    reranker = LLMReranker(tokenizer)
    yes, no = min(reranker.yes_ids), min(reranker.no_ids)
    chunks = [
        ScoredChunk(f"c{i}", f"d{i}", "t", "s", 0, 0, 10, text, 1.0 - i / 10, f"readers-{i}")
        for i, text in enumerate(["Paris is in Italy.", "Paris is the capital of France."])
    ]
    salts = set()

    async def generate(token_ids, params, narrowing=()):
        salts.add(narrowing)
        prompt = tokenizer.decode(token_ids)
        p_yes = 0.9 if "Paris is the capital" in prompt else 0.2
        completion = CompletionOutput(
            0,
            "",
            [yes],
            "length",
            logprobs=[{yes: Logprob(math.log(p_yes), 1), no: Logprob(math.log(1 - p_yes), 2)}],
        )
        yield RequestOutput(
            "r", None, token_ids, [completion], True, 0, RequestMetrics(0, *[None] * 3)
        )

    ranked = asyncio.run(rerank(reranker, "What is the capital of France?", chunks, generate))
    assert [c.chunk_id for c in ranked] == ["c1", "c0"]
    assert ranked[0].score == 0.9 and abs(ranked[1].score - 0.2) < 1e-9
    # Each judge prompt carries a passage, so its KV blocks are salted by the passage's readers.
    assert salts == {((0, "readers-0"),), ((0, "readers-1"),)}


def test_cross_encoder_reranker_loads_a_folder_and_orders_by_its_scores(tmp_path):
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from ragserve.rag.embeddings import resolve_embedding_model
    from ragserve.rag.rerank import CrossEncoderReranker

    # A tiny random cross-encoder (no such model ships in a package), with MiniLM's tokenizer.
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(resolve_embedding_model("all-minilm-l6-v2"))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    chunks = [
        ScoredChunk(f"c{i}", f"d{i}", "t", "s", 0, 0, 10, text, 0.0)
        for i, text in enumerate(["alpha beta", "gamma delta epsilon", "zeta"])
    ]
    expected = CrossEncoder(str(tmp_path), device="cpu").predict(
        [("question?", c.text) for c in chunks]
    )
    ranked = asyncio.run(rerank(CrossEncoderReranker(tmp_path), "question?", chunks, None))
    assert [c.score for c in ranked] == sorted((float(s) for s in expected), reverse=True)
    assert {c.chunk_id for c in ranked} == {"c0", "c1", "c2"}
