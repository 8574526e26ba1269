"""Measuring instruments for RAG quality and safety: `ragserve eval ...`."""
