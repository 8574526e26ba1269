"""Retrieval-augmented generation: parsing, chunking, embeddings, stores, retrieval, answers."""
