"""Engine settings. Every limit the scheduler enforces has a field here."""

import fcntl
import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

DEFAULT_MODEL = "smollm2-135m-instruct"
# CPU flags of native bfloat16 arithmetic. Without them torch emulates bfloat16 matmuls, and on
# such a CPU (AMD EPYC with AVX2 only, measured) a 336-token prefill of the default model takes
# 4.3 s in bfloat16 against 0.7 s in float32.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


QUANTIZATIONS = ("none", "int8")
# "auto": the KV cache in the engine's dtype; "int8": rounded per position and kv head, with a
# float32 scale each (kv_cache.py).
KV_CACHE_DTYPES = ("auto", "int8")


def cache_dir() -> Path:
    """Where imported models and built kernels are kept (RAGSERVE_HOME)."""
    return Path(os.environ.get("RAGSERVE_HOME", Path.home() / ".cache" / "ragserve"))


def made_once(target: Path, is_made: Callable[[Path], bool], make: Callable[[Path], None]) -> Path:
    """target, made once: make() fills a scratch folder beside it, renamed into place under a
    lock, so that two processes never make it twice and none reads it half made."""
    if is_made(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_made(target):
            return target
        scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
        try:
            make(scratch)
            scratch.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target


# RAGSERVE_CPU_ISA holds ragserve's own kernels, and the paths chosen by CPU flags, to fewer
# instructions than the CPU has: kernels for a fleet that mixes CPU types, or one CPU type's
# paths measured on a newer CPU (docs/benchmarks.md). "avx2": AVX2 and FMA (x86-64-v3);
# "avx512": AVX-512 with BF16 and VNNI and no AMX (Cooper Lake's instructions, which Zen 4 and
# later and Sapphire Rapids and later also have). torch's kernels follow their own variables
# (docs/operations.md). The value is what GCC's -march takes.
CPU_ISAS = {"native": "native", "avx2": "x86-64-v3", "avx512": "cooperlake"}
# What each held ISA does without: every flag that starts so.
HIDDEN_FLAGS = {"native": (), "avx2": ("avx512", "amx", "avx_vnni"), "avx512": ("amx",)}
# What the avx512 ISA needs of the CPU, beyond AVX2.
AVX512_NEEDS = frozenset(
    {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16"}
)


def cpu_isa() -> str:
    isa = os.environ.get("RAGSERVE_CPU_ISA", "native")
    if isa not in CPU_ISAS:
        raise ValueError(f"RAGSERVE_CPU_ISA must be one of {', '.join(CPU_ISAS)}, not {isa!r}")
    if isa == "avx512" and (lacking := AVX512_NEEDS - machine_flags()):
        raise ValueError(
            f"RAGSERVE_CPU_ISA=avx512 needs {', '.join(sorted(lacking))}, which this CPU lacks"
        )
    return isa


@functools.cache
def cpu_vendor() -> str:
    """The CPU's vendor as Linux names it ("GenuineIntel", "AuthenticAMD"; empty where
    /proc/cpuinfo is unreadable)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            line = next((ln for ln in cpuinfo if ln.startswith("vendor_id")), ":")
    except OSError:
        return ""
    return line.split(":", 1)[1].strip()


@functools.cache
def machine_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux names them (empty where /proc/cpuinfo is unreadable)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return frozenset(next((ln for ln in cpuinfo if ln.startswith("flags")), "").split())
    except OSError:
        return frozenset()


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The flags the engine chooses its paths by: the CPU's, without those past the ISA that
    RAGSERVE_CPU_ISA holds the engine to."""
    hidden = HIDDEN_FLAGS[cpu_isa()]
    return frozenset(flag for flag in machine_flags() if not flag.startswith(hidden))


def native_bf16() -> bool:
    return not cpu_flags().isdisjoint(BF16_FLAGS)


def resolve_dtype(dtype: str) -> str:
    """ "auto": bfloat16 where the CPU computes it natively, else float32."""
    if dtype == "auto":
        return "bfloat16" if native_bf16() else "float32"
    return dtype


@dataclass
class EngineConfig:
    model: str = DEFAULT_MODEL
    # "auto" (resolve_dtype), "float32" or "bfloat16".
    dtype: str = "auto"
    # "none", or "int8": every projection's weight rounded to int8 with a scale per row
    # (layers.Projection.to_int8); activations stay in dtype.
    quantization: str = "none"
    # KV_CACHE_DTYPES: "int8" holds about twice the tokens and reads half the bytes a decode
    # step, for a small loss (docs/benchmarks.md, quantization).
    kv_cache_dtype: str = "auto"
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
    # Speculative decoding by prompt lookup (ngram.py) for greedy and unseeded sampled requests that
    # nothing adjusts (SamplingParams.speculatable): draft tokens verified per step (0: off). While
    # at most speculative_max_batch sequences decode, every such sequence gets drafts: a step there
    # streams the weights, and a few more rows come almost free. Past that the step is
    # compute-bound, a draft token costs about what a decode does, and only sequences whose recent
    # drafts were accepted at a share of at least speculative_min_acceptance (an exponential
    # average) get more.
    speculative_tokens: int = 4
    speculative_max_batch: int = 4
    speculative_min_acceptance: float = 0.5
    # Every request in the batch-invariant mode (model.py); otherwise only those asking.
    batch_invariant: bool = False
    num_threads: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"dtype must be 'auto', 'float32' or 'bfloat16', got {self.dtype!r}")
        self.dtype = resolve_dtype(self.dtype)
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(
                f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {self.quantization!r}"
            )
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(
                f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, "
                f"got {self.kv_cache_dtype!r}"
            )
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
        for name in ("output_reserve_tokens", "speculative_tokens", "speculative_max_batch"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if not 0 <= self.speculative_min_acceptance <= 1:
            raise ValueError("speculative_min_acceptance must be between 0 and 1")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError("max_model_len must be at least 2")

    @property
    def threads(self) -> int:
        return self.num_threads or os.cpu_count() or 1


# Bytes of one element of the KV cache in each dtype an engine runs in, and of an int8 cache's
# scale (one per position and kv head, for its keys and again for its values).
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
SCALE_BYTES = 4


@dataclass(frozen=True)
class KVSizing:
    """The KV pool a config gives a model, and the context length that follows from it."""

    num_blocks: int
    bytes_per_token: int
    max_model_len: int


class ModelShape(Protocol):
    """What sizing needs of a model (ModelSpec has it)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int


def size_kv_cache(config: EngineConfig, model: ModelShape) -> KVSizing:
    """As many whole blocks as kv_cache_memory_bytes holds (a ValueError if not even one), and
    the context length: config.max_model_len or the model's own, capped by what the pool holds.
    A pure function of the config and the model's shape, so prompt building knows the context
    length without building the engine, and the engine sizes itself with it."""
    if config.kv_cache_dtype == "int8":
        per_head = model.head_dim + SCALE_BYTES
    else:
        per_head = model.head_dim * DTYPE_BYTES[config.dtype]
    per_token = 2 * model.num_layers * model.num_kv_heads * per_head
    num_blocks = config.kv_cache_memory_bytes // (per_token * config.block_size)
    if num_blocks < 1:
        raise ValueError(
            f"kv_cache_memory_bytes={config.kv_cache_memory_bytes} holds no block of "
            f"{config.block_size} tokens ({per_token} bytes per token)"
        )
    context = config.max_model_len or model.max_position_embeddings
    return KVSizing(num_blocks, per_token, min(context, num_blocks * config.block_size))
