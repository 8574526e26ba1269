"""The embedded store's vectors in memory: every current chunk's embedding as one matrix, by
chunk rowid, reloaded when the index version moves, and scored exactly."""

import sqlite3

import numpy as np


class EmbeddingMatrix:
    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._version = ""
        self._rowids = np.empty(0, dtype=np.int64)
        self._matrix = np.empty((0, dimension), dtype=np.float32)

    def refresh(self, db: sqlite3.Connection, version: str, current_chunks: str) -> None:
        """Reload from `current_chunks` (a FROM clause naming chunks `c`) unless the index
        version is the one loaded. Earlier versions' chunks are never searched, so never
        loaded."""
        if version == self._version:
            return
        rows = db.execute(
            f"SELECT c.rowid, c.embedding FROM {current_chunks} ORDER BY c.rowid"
        ).fetchall()
        self._rowids = np.array([r[0] for r in rows], dtype=np.int64)
        self._matrix = (
            np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(
                len(rows), self.dimension
            )
            if rows
            else np.empty((0, self.dimension), dtype=np.float32)
        )
        self._version = version

    def top(self, permitted: np.ndarray, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k permitted rowids (sorted) nearest the vector, with their cosine scores."""
        rows = np.searchsorted(self._rowids, permitted)
        # einsum's loop computes each row's dot product alone, the same way whatever else is
        # in the batch (BLAS would block rows, and a row's rounding could move with the number
        # of permitted rows); ties go to the older chunk (stable sort).
        scores = np.einsum("ij,j->i", self._matrix[rows], np.asarray(vector, np.float32))
        best = np.argsort(-scores, kind="stable")[:k]
        return [(int(permitted[i]), float(scores[i])) for i in best]
