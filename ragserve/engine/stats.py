"""What the engine reports about itself: occupancy and the time each step phase takes."""

from dataclasses import dataclass, fields, replace


@dataclass
class EngineStats:
    num_running: int
    num_waiting: int
    num_queued_tokens: int
    kv_blocks_total: int
    kv_blocks_free: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int
    # Speculative decoding: draft tokens verified, and those accepted.
    spec_decode_draft_tokens: int = 0
    spec_decode_accepted_tokens: int = 0
    # Constrained outputs closed early to fit max_tokens (ending.py).
    constrained_closed_early: int = 0

    @classmethod
    def total(cls, replicas: list["EngineStats"]) -> "EngineStats":
        """The sum over replicas: requests, blocks and counters all add up."""
        return cls(**{f.name: sum(getattr(s, f.name) for s in replicas) for f in fields(cls)})

    @property
    def kv_blocks_used(self) -> int:
        return self.kv_blocks_total - self.kv_blocks_free

    @property
    def kv_cache_usage(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total


@dataclass
class StepTimes:
    """Seconds spent in each phase of step(), summed over steps."""

    steps: int = 0
    schedule_s: float = 0.0
    forward_s: float = 0.0
    sample_s: float = 0.0
    output_s: float = 0.0

    def copy(self) -> "StepTimes":
        return replace(self)

    def since(self, earlier: "StepTimes") -> "StepTimes":
        return StepTimes(*(getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)))
