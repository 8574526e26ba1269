"""Per-request sampling settings, named as in vLLM."""

from dataclasses import dataclass, field

from ragserve.engine.errors import InvalidRequestError
from ragserve.engine.structured import OutputConstraint

MAX_LOGPROBS = 20
# Choices per request: each is a sequence of its own in the batch, so n multiplies the work.
MAX_CHOICES = 16
# OpenAI's bounds for logit_bias values and for the presence and frequency penalties.
MAX_LOGIT_BIAS = 100.0
MAX_PENALTY = 2.0
# Seeds (plus the choice index) must fit the generator's 64-bit state.
SEED_RANGE = range(-(2**63), 2**64 - MAX_CHOICES)


@dataclass
class SamplingParams:
    # Completions per prompt; they share the prompt's KV blocks through the prefix cache.
    n: int = 1
    max_tokens: int | None = 16
    # End-of-sequence and stop tokens are masked, and stop strings not looked for, until this
    # many tokens have been generated.
    min_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    # Divides positive (multiplies negative) logits of every token already in the prompt or
    # the output; 1 is off.
    repetition_penalty: float = 1.0
    # Subtracted once from the logits of tokens the output already holds.
    presence_penalty: float = 0.0
    # Subtracted per occurrence in the output.
    frequency_penalty: float = 0.0
    # Added to the logits of these token ids before sampling (greedy included).
    logit_bias: dict[int, float] | None = None
    stop: list[str] | str | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    # Each output token's log-probability and those of the this many most likely tokens, under
    # the distribution the token was drawn from: after penalties, logit bias, the constraint's
    # mask and temperature (1 for greedy), before top-k/top-p (vLLM's processed_logprobs).
    logprobs: int | None = None
    # Each prompt token's log-probability under the model given the tokens before it, and those
    # of the this many most likely tokens there (lm-evaluation-harness's loglikelihood).
    prompt_logprobs: int | None = None
    # Compute this request in the batch-invariant mode (model.py): greedy decoding then gives
    # the same tokens whatever the batch, chunking or prefix cache; slower on long prompts.
    batch_invariant: bool = False
    # The output must match this (structured.py): only tokens that can continue a match are
    # sampled.
    constraint: OutputConstraint | None = None
    stop_strings: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.n <= MAX_CHOICES:
            raise InvalidRequestError(f"n must be in [1, {MAX_CHOICES}], got {self.n}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            raise InvalidRequestError(f"min_tokens must be >= 0, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise InvalidRequestError(
                f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})"
            )
        if self.temperature < 0:
            raise InvalidRequestError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and self.seed not in SEED_RANGE:
            raise InvalidRequestError(f"seed must be a 64-bit integer, got {self.seed}")
        if self.top_k == 0 or self.top_k < -1:
            raise InvalidRequestError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if self.repetition_penalty <= 0:
            raise InvalidRequestError(
                f"repetition_penalty must be > 0 (1 is off), got {self.repetition_penalty}"
            )
        for name in ("presence_penalty", "frequency_penalty"):
            if not -MAX_PENALTY <= getattr(self, name) <= MAX_PENALTY:
                raise InvalidRequestError(f"{name} must be in [-2, 2], got {getattr(self, name)}")
        for token, bias in (self.logit_bias or {}).items():
            if token < 0:
                raise InvalidRequestError(f"logit_bias token ids must be >= 0, got {token}")
            if not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:
                raise InvalidRequestError(
                    f"logit_bias values must be in [-100, 100], got {bias} for token {token}"
                )
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if any(not s for s in stops):
            raise InvalidRequestError("stop strings must not be empty")
        self.stop_strings = tuple(stops)
        for name in ("logprobs", "prompt_logprobs"):
            count = getattr(self, name)
            if count is not None and not 0 <= count <= MAX_LOGPROBS:
                raise InvalidRequestError(f"{name} must be in [0, {MAX_LOGPROBS}], got {count}")
        if any(t < 0 for t in self.stop_token_ids or []):
            raise InvalidRequestError("stop_token_ids must be non-negative")
        if self.constraint is not None and self.min_tokens:
            # A complete match allows only EOS, which min_tokens would forbid.
            raise InvalidRequestError("min_tokens cannot be combined with structured output")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def speculatable(self) -> bool:
        """Whether draft tokens can be checked against this request's own choices (Sampler.
        verify): nothing adjusts its logits or constrains or reports them. A seeded sampled
        request keeps to one token a step: whether it gets drafts depends on the batch, and
        its noise would then too."""
        return (
            (self.greedy or self.seed is None)
            and not self.adjusts_logits
            and self.logprobs is None
            and self.constraint is None
        )

    @property
    def adjusts_logits(self) -> bool:
        """Whether anything changes the model's logits before sampling."""
        return bool(
            self.min_tokens
            or self.logit_bias
            or self.repetition_penalty != 1
            or self.presence_penalty
            or self.frequency_penalty
        )
