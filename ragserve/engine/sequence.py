"""One request as the scheduler sees it: tokens, KV blocks, progress and timings."""

import time
from dataclasses import dataclass, field
from enum import Enum

import llguidance
import torch

from ragserve.engine.cache_salt import CacheSalt
from ragserve.engine.ending import EndingWatch
from ragserve.engine.outputs import PositionLogprobs
from ragserve.engine.sampling_params import SamplingParams


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    max_tokens: int
    user: str = "default"
    cache_salt: CacheSalt = field(default_factory=CacheSalt)
    priority: int = 0
    # Which of the request's n choices this sequence generates.
    index: int = 0
    arrival_time: float = field(default_factory=time.monotonic)
    token_ids: list[int] = field(init=False)
    status: SequenceStatus = SequenceStatus.WAITING
    # Tokens whose keys and values are already in the KV cache.
    num_computed_tokens: int = 0
    # Prompt tokens served from the prefix cache at first admission.
    num_cached_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    # Chained hashes of the full blocks of token_ids, computed lazily.
    block_hashes: list[bytes] = field(default_factory=list)
    # Blocks already published to the prefix cache.
    num_published_blocks: int = 0
    num_preemptions: int = 0
    finish_reason: str | None = None
    generator: torch.Generator | None = None
    # Exponential average of the accepted share of this sequence's drafts; None before any.
    draft_acceptance: float | None = None
    # Tracks the output against the request's constraint (structured.py), if it has one.
    matcher: llguidance.LLMatcher | None = None
    # With a matcher: when the output must be closed to end inside max_tokens (ending.py).
    ending: EndingWatch | None = None
    # Per output token, when the request asked for logprobs.
    logprobs: list[PositionLogprobs] = field(default_factory=list)
    # Per prompt token, when the request asked for them; the first has none.
    prompt_logprobs: list[PositionLogprobs | None] = field(default_factory=lambda: [None])
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None

    def __post_init__(self) -> None:
        self.token_ids = list(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED
