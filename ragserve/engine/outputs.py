"""Request outputs shaped like vLLM's, so code written against vLLM reads them unchanged."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Logprob:
    logprob: float
    # 1 for the most likely token.
    rank: int


# One position's log-probabilities: the chosen token's and the top-n, by token id (vLLM's shape).
PositionLogprobs = dict[int, Logprob]


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    cumulative_logprob: float | None = None
    logprobs: list[PositionLogprobs] | None = None
    # Not in vLLM: the output was closed with its grammar's shortest ending to fit max_tokens.
    closed_early: bool = False

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    finished_time: float | None
    num_preemptions: int = 0

    @property
    def queue_time(self) -> float | None:
        if self.first_scheduled_time is None:
            return None
        return self.first_scheduled_time - self.arrival_time

    @property
    def time_to_first_token(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int
    metrics: RequestMetrics
    # Per prompt token when asked for (None for the first, which nothing predicts).
    prompt_logprobs: list[PositionLogprobs | None] | None = None
