"""Benchmarks users run: offline engine throughput, and serving load."""
