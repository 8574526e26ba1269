"""Engine test helpers: sequences and a scheduler without a model; prompts, and checks that a
finished engine holds no request and no block; the flags of the mapping memory lies in."""

from pathlib import Path

from ragserve import LLM
from ragserve.engine.block_manager import BlockManager
from ragserve.engine.cache_salt import CacheSalt
from ragserve.engine.config import EngineConfig
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.scheduler import Scheduler
from ragserve.engine.sequence import Sequence


def make_seq(
    request_id: str,
    tokens: list[int],
    max_tokens: int = 16,
    user: str = "default",
    salt: str | CacheSalt = "",
    priority: int = 0,
    arrival: float = 0.0,
) -> Sequence:
    return Sequence(
        request_id=request_id,
        prompt_token_ids=tokens,
        params=SamplingParams(max_tokens=max_tokens, temperature=0),
        max_tokens=max_tokens,
        user=user,
        cache_salt=CacheSalt(salt) if isinstance(salt, str) else salt,
        priority=priority,
        arrival_time=arrival,
    )


def make_scheduler(num_blocks: int, block_size: int = 4, **config: int) -> Scheduler:
    # Without drafts unless asked: run_step's model repeats one token, which prompt lookup
    # would always draft.
    config.setdefault("speculative_tokens", 0)
    engine_config = EngineConfig(block_size=block_size, **config)
    return Scheduler(engine_config, BlockManager(num_blocks, block_size, True))


def run_step(scheduler: Scheduler, next_token: int = 7) -> dict[str, int]:
    """Schedule one step, pretend the model ran, and return {request_id: tokens computed}."""
    batch = scheduler.schedule()
    sampled = {
        seq: [next_token]
        for seq, num in zip(batch.seqs, batch.num_new_tokens, strict=True)
        if seq.num_computed_tokens + num == seq.num_tokens
    }
    scheduler.postprocess(batch, sampled)
    for seq in list(scheduler.running):
        if seq.num_output_tokens >= seq.max_tokens:
            scheduler.finish(seq, "length")
    return {s.request_id: n for s, n in zip(batch.seqs, batch.num_new_tokens, strict=True)}


PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three laws of thermodynamics are",
    "List of prime numbers: 2, 3, 5,",
]
GREEDY = SamplingParams(max_tokens=32, temperature=0)


def finish_all(llm: LLM) -> list:
    outputs = []
    while llm.engine.has_unfinished_requests():
        outputs.extend(llm.engine.step())
    return outputs


def assert_no_leak(llm: LLM) -> None:
    stats = llm.engine.stats()
    assert stats.num_running == 0 and stats.num_waiting == 0
    assert stats.kv_blocks_free == stats.kv_blocks_total
    assert all(b.ref_count == 0 for b in llm.engine.block_manager.blocks)


def mapping_field(address: int, field: str) -> list[str]:
    """A field (e.g. "VmFlags", "Rss") of this process's mapping that holds address, split
    (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(part, 16) for part in head.split("-"))
            inside = start <= address < end
        elif inside and head == f"{field}:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def mapping_flags(address: int) -> list[str]:
    return mapping_field(address, "VmFlags")
