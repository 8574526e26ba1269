"""Optional second-stage ranking of retrieved chunks. Off by default: measure before enabling.

CrossEncoderReranker scores (question, chunk) pairs with any sentence-transformers CrossEncoder
folder; no such model ships in this project's packages, so it is there for deployments that
bring one.
"""

import os
from pathlib import Path
from typing import Protocol

from ragserve.rag.documents import ScoredChunk


class Reranker(Protocol):
    def rerank(self, question: str, chunks: list[ScoredChunk]) -> list[ScoredChunk]:
        """The same chunks, best first, with their scores replaced by the reranker's."""
        ...


class CrossEncoderReranker:
    def __init__(self, folder: str | Path) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import CrossEncoder

        if not Path(folder).is_dir():
            raise ValueError(f"{folder} is not a CrossEncoder folder")
        self._model = CrossEncoder(str(folder), device="cpu")

    def rerank(self, question: str, chunks: list[ScoredChunk]) -> list[ScoredChunk]:
        if not chunks:
            return []
        scores = self._model.predict([(question, c.text) for c in chunks])
        rescored = [
            ScoredChunk(**{**c.__dict__, "score": float(s)})
            for c, s in zip(chunks, scores, strict=True)
        ]
        return sorted(rescored, key=lambda c: -c.score)
