"""Optional second-stage ranking of retrieved chunks. Off by default: measure before enabling.

- LLMReranker asks the served model, for each chunk, whether the passage answers the question,
  and scores it by P(yes) / (P(yes) + P(no)) from the next-token log-probabilities.
- CrossEncoderReranker scores (question, chunk) pairs with any sentence-transformers
  CrossEncoder folder; no such model ships in this project's packages, so it is there for
  deployments that bring one.
"""

import asyncio
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ragserve.engine.client import Generate
from ragserve.engine.sampling_params import SamplingParams
from ragserve.rag.documents import ScoredChunk, evidence_salt

if TYPE_CHECKING:  # importing transformers takes a second; only the LLM reranker needs it
    from transformers import PreTrainedTokenizerBase

JUDGE_PROMPT = (
    "Passage:\n{passage}\n\nQuestion: {question}\n"
    "Does the passage contain the answer to the question? Reply yes or no."
)


class Reranker(Protocol):
    async def scores(
        self, question: str, texts: list[str], salts: list[str], generate: Generate
    ) -> list[float]:
        """Each text's relevance to the question, higher is better. salts: per text, the
        prefix-cache salt of a prompt that carries it (who may read the text)."""
        ...


async def rerank(
    reranker: Reranker, question: str, chunks: list[ScoredChunk], generate: Generate
) -> list[ScoredChunk]:
    """The same chunks, best first, with their scores replaced by the reranker's."""
    texts = [c.text for c in chunks]
    scores = await reranker.scores(question, texts, [evidence_salt(c) for c in chunks], generate)
    rescored = [
        ScoredChunk(**{**c.__dict__, "score": float(s)})
        for c, s in zip(chunks, scores, strict=True)
    ]
    return sorted(rescored, key=lambda c: -c.score)


class LLMReranker:
    def __init__(self, tokenizer: "PreTrainedTokenizerBase", max_passage_chars: int = 2000) -> None:
        self.tokenizer = tokenizer
        self.max_passage_chars = max_passage_chars
        self.yes_ids = self._token_ids(("yes", "Yes", " yes", " Yes", "YES"))
        self.no_ids = self._token_ids(("no", "No", " no", " No", "NO"))
        # Batch-invariant like the answer itself: the same passages rank the same way each time.
        self.params = SamplingParams(max_tokens=1, temperature=0, logprobs=20, batch_invariant=True)

    def _token_ids(self, words: tuple[str, ...]) -> set[int]:
        ids = (self.tokenizer.encode(w, add_special_tokens=False) for w in words)
        return {i[0] for i in ids if len(i) == 1}

    def prompt(self, question: str, text: str) -> list[int]:
        content = JUDGE_PROMPT.format(passage=text[: self.max_passage_chars], question=question)
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}],
            tokenize=True,
            add_generation_prompt=True,
            return_dict=False,
        )

    async def _score(self, question: str, text: str, salt: str, generate: Generate) -> float:
        last = None
        async for output in generate(self.prompt(question, text), self.params, ((0, salt),)):
            last = output.outputs[0]
        top = (last.logprobs or [{}])[0] if last is not None else {}
        yes = sum(math.exp(v.logprob) for t, v in top.items() if t in self.yes_ids)
        no = sum(math.exp(v.logprob) for t, v in top.items() if t in self.no_ids)
        return yes / (yes + no) if yes + no > 0 else 0.0

    async def scores(
        self, question: str, texts: list[str], salts: list[str], generate: Generate
    ) -> list[float]:
        pairs = zip(texts, salts, strict=True)
        return list(
            await asyncio.gather(*(self._score(question, t, s, generate) for t, s in pairs))
        )


class CrossEncoderReranker:
    def __init__(self, folder: str | Path) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import CrossEncoder

        if not Path(folder).is_dir():
            raise ValueError(f"{folder} is not a CrossEncoder folder")
        self._model = CrossEncoder(str(folder), device="cpu")

    async def scores(
        self, question: str, texts: list[str], salts: list[str], generate: Generate
    ) -> list[float]:
        if not texts:
            return []
        scores = await asyncio.to_thread(self._model.predict, [(question, t) for t in texts])
        return [float(s) for s in scores]
