"""The bounded prompt marks where each source's text starts, for the prefix cache's salts."""

from ragserve.engine.client import FixedModel
from ragserve.rag.documents import ScoredChunk
from ragserve.rag.prompt import PromptBuilder


def test_each_source_narrows_the_cache_salt_at_its_first_token(llm_fp32):
    tokenizer = llm_fp32.get_tokenizer()
    builder = PromptBuilder(FixedModel(tokenizer, 2048), output_reserve=64, evidence_budget=800)
    chunks = [
        ScoredChunk("c1", "d1", "Memo", "s", 0, 0, 60, "The deal costs 120 million euros.", 1.0),
        ScoredChunk("c2", "d2", "Wiki", "s", 0, 0, 60, "Globex is a fictional firm.", 0.9, "r2"),
    ]
    chunks[0].readers = "r1"
    prompt = builder.build("How much does the deal cost?", chunks)
    assert [salt for _, salt in prompt.narrowing] == ["r1", "r2"]
    first, second = (position for position, _ in prompt.narrowing)
    # Nothing of a source is before its narrowing; its opening tag starts right there.
    assert "<source" not in tokenizer.decode(prompt.token_ids[:first])
    assert tokenizer.decode(prompt.token_ids[first:]).lstrip().startswith("<source n=1")
    assert "120 million" not in tokenizer.decode(prompt.token_ids[:second])
    assert tokenizer.decode(prompt.token_ids[second:]).lstrip().startswith("<source n=2")


def test_a_chunk_without_known_readers_gets_a_salt_of_its_own(llm_fp32):
    builder = PromptBuilder(FixedModel(llm_fp32.get_tokenizer(), 2048), 64, 800)
    chunk = ScoredChunk("c1", "d1", "Memo", "s", 0, 0, 10, "Some text.", 1.0)
    salts = {builder.build("q?", [chunk]).narrowing[0][1] for _ in range(2)}
    assert len(salts) == 2 and all(s.startswith("unshared:") for s in salts)
