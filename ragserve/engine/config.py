"""Engine settings. Every limit the scheduler enforces has a field here."""

import os
from dataclasses import dataclass

DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass
class EngineConfig:
    model: str = DEFAULT_MODEL
    dtype: str = "bfloat16"
    block_size: int = 16
    # KV pool size; the number of blocks follows from the model's bytes per token.
    kv_cache_memory_bytes: int = 2 << 30
    # None: the model's own context length, capped by what the KV pool can hold.
    max_model_len: int | None = None
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 512
    # Output tokens a request must find room for at admission, beyond its prompt. Growth past
    # it is served by preemption, so this trades admission latency against preemptions.
    output_reserve_tokens: int = 64
    max_queued_requests: int = 1024
    max_queued_tokens: int = 1 << 20
    enable_prefix_caching: bool = True
    num_threads: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {self.dtype!r}")
        positive = {
            "block_size": self.block_size,
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_queued_requests": self.max_queued_requests,
            "max_queued_tokens": self.max_queued_tokens,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.output_reserve_tokens < 0:
            raise ValueError("output_reserve_tokens must not be negative")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError("max_model_len must be at least 2")

    @property
    def threads(self) -> int:
        return self.num_threads or os.cpu_count() or 1
