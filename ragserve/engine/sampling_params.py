"""Per-request sampling settings, named as in vLLM."""

from dataclasses import dataclass, field

from ragserve.engine.errors import InvalidRequestError

MAX_LOGPROBS = 20


@dataclass
class SamplingParams:
    n: int = 1
    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop: list[str] | str | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    # Log-probabilities of the this many most likely tokens at each step (of the raw model
    # distribution, before temperature and filtering), as in vLLM.
    logprobs: int | None = None
    stop_strings: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.n != 1:
            raise InvalidRequestError("n must be 1: one completion per request is supported")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise InvalidRequestError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise InvalidRequestError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if any(not s for s in stops):
            raise InvalidRequestError("stop strings must not be empty")
        self.stop_strings = tuple(stops)
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise InvalidRequestError(f"logprobs must be in [0, {MAX_LOGPROBS}]")
        if any(t < 0 for t in self.stop_token_ids or []):
            raise InvalidRequestError("stop_token_ids must be non-negative")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
