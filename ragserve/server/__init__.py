"""The OpenAI-compatible HTTP server: auth, limits, streaming, metrics, response cache."""
