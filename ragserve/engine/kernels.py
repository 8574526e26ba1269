"""The engine's C++ CPU kernels (csrc/), built on first use once per CPU type, torch version and
source under the cache directory, and the PyTorch paths used where no compiler is available.

Each kernel and its PyTorch path are checked against plain references in
tests/engine/test_kernels.py and tests/engine/test_attention.py.
"""

import fcntl
import functools
import hashlib
import logging
import shutil
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
import torch.nn.functional as F

from ragserve.engine.config import (
    CPU_ISAS,
    cache_dir,
    cpu_flags,
    cpu_isa,
    cpu_vendor,
    native_bf16,
)
from ragserve.engine.kv_cache import LayerCache, keys_by_position

logger = logging.getLogger(__name__)

SOURCES = (
    "bindings.cpp",
    "paged_attention.cpp",
    "linear.cpp",
    "packed_bf16_linear.cpp",
    "int8_linear.cpp",
    "elementwise.cpp",
    "token_mask.cpp",
)
# Up to this many rows a linear layer streams its weights once through the small-batch kernel;
# past it a matmul library's blocking wins (docs/benchmarks.md). On AVX2 the kernel is 2-3×
# PyTorch's matmul at 1-8 rows and still ahead at 32. With AVX-512 BF16 and no AMX, its
# bfloat16 dot products stream a token's projections faster than oneDNN's bfloat16 matmul up to
# 8 rows (1.03× at 8, measured over every layer's weights from memory); oneDNN's blocking wins
# from 12 (1.2×). With AMX, oneDNN's AMX matmul on its blocked copy wins from 6 rows (1.2× at
# 6, 1.7× at 12). Over every projection alone the dot products lead it at 3-5 rows too (1.2× at
# 3, 1.04× at 5), but in the engine one sequence's 5-row verify steps took 18.9 ms p50 through
# the kernel against 18.6 through oneDNN (steps alternating the two), so the kernel stops at 2.
# With AVX-512 BF16 and no AMX, on packed weights (packing.small_batch_weight) the tiled dot
# products lead oneDNN's bfloat16 matmul at every length (packed_long_inputs): over every
# projection of SmolLM2 with the vocabulary's, 7.9 against 13.9 ms at 1 row, 8.9 / 14.6 at 8,
# 22.4 / 28.6 at 32, 41.0 / 48.2 at 64 (AMD EPYC family 25, 2 threads, alternating).
SMALL_BATCH_ROWS = 32
BF16_DOT_SMALL_BATCH_ROWS = 8
AMX_SMALL_BATCH_ROWS = 2
# int8 weights: their kernel streams half bfloat16's bytes. With AVX-512 BF16 and no AMX, longer
# inputs meet the rounded values packed for the bfloat16 kernel (packed_long_inputs), whose tiles
# lead from 6-8 rows over every projection of SmolLM2 in huge pages (4.8 against 8.6 ms at 1 row,
# 5.8 / 9.0 at 4, 7.4 / 8.8 and 12.0 / 11.4 at 6, 11.3 / 9.2 at 8, 15.3 / 12.5 at 12).
# With AMX oneDNN was 1.1× the kernel at 8 rows, a tie at 10 (measured before the packed layout).
# Without a bfloat16 matmul the copy is float32, a quarter of the kernel's speed of reading, and
# the kernel's AVX2 form stays ahead of oneDNN on it to 128 rows (AVX2 code on the AVX-512 BF16
# machine, docs/benchmarks.md): there it takes what the float32 kernel takes.
INT8_SMALL_BATCH_ROWS = 6
INT8_AMX_SMALL_BATCH_ROWS = 8


CSRC = Path(__file__).parent / "csrc"


def compiler_flags() -> list[str]:
    flags = ["-O3", f"-march={CPU_ISAS[cpu_isa()]}", "-ffast-math", "-fopenmp"]
    # The linear kernels prefetch their weights' stream ahead where that was measured to pay:
    # on an Intel Xeon with AMX a one-row pass over SmolLM2's projections took 1.13-1.2x less
    # time with it, where on an AMD EPYC (family 25) prefetching the int8 kernel's next tiles
    # made it 5-15% slower.
    if cpu_vendor() == "GenuineIntel":
        flags.append("-DRAGSERVE_SOFTWARE_PREFETCH")
    return flags


def build_directory(csrc: Path = CSRC) -> Path:
    """Where the kernels are built: keyed by what the build is made of (torch, sources, headers,
    flags, and the CPU's flags, which -march=native builds for), so two checkouts, or two CPU
    types, that share a cache directory each keep their own build instead of rebuilding the
    other's or running code their CPU lacks."""
    made_of = hashlib.sha256(
        " ".join([torch.__version__, *compiler_flags(), *sorted(cpu_flags())]).encode()
    )
    for source in sorted(csrc.iterdir()):
        made_of.update(source.name.encode() + b"\0" + source.read_bytes())
    return cache_dir() / "torch_extensions" / f"{torch.__version__}-{made_of.hexdigest()[:16]}"


@functools.cache
def extension() -> ModuleType | None:
    from torch.utils.cpp_extension import load

    build_dir = build_directory()
    build_dir.mkdir(parents=True, exist_ok=True)
    # torch marks a build in progress with a plain file that a killed build leaves behind, and
    # every later start would wait on it forever. An flock dies with its process: whoever holds
    # it is the only builder, so a marker found then is stale.
    with (build_dir / "build.flock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        (build_dir / "lock").unlink(missing_ok=True)
        # Built from a copy inside the build directory: torch rebuilds whenever the source paths
        # change, so two checkouts building from their own csrc/ would rebuild each other's.
        sources = build_dir / "csrc"
        if not sources.is_dir():
            shutil.copytree(CSRC, sources.with_suffix(".part"), dirs_exist_ok=True)
            sources.with_suffix(".part").rename(sources)
        try:
            return load(
                name="ragserve_kernels",
                sources=[str(sources / name) for name in SOURCES],
                extra_cflags=compiler_flags(),
                extra_ldflags=["-fopenmp"],
                build_directory=str(build_dir),
            )
        except Exception as error:  # a missing compiler must not stop the engine
            logger.warning("C++ kernels unavailable, using the PyTorch paths: %s", error)
            return None


def small_batch_rows(weight: torch.Tensor) -> int:
    """Inputs up to this many rows go through the small-batch kernel (SMALL_BATCH_ROWS)."""
    if weight.dtype == torch.int8:
        if not native_bf16():
            return SMALL_BATCH_ROWS
        return INT8_AMX_SMALL_BATCH_ROWS if "amx_bf16" in cpu_flags() else INT8_SMALL_BATCH_ROWS
    if weight.dtype == torch.bfloat16 and native_bf16():
        if "amx_bf16" in cpu_flags():
            return AMX_SMALL_BATCH_ROWS
        return BF16_DOT_SMALL_BATCH_ROWS
    return SMALL_BATCH_ROWS


def packed_long_inputs() -> bool:
    """Whether the packed bfloat16 kernel (packing.pack_pairs) takes inputs of every length, and
    an int8 weight's rounded values for inputs past its kernel's rows are packed for it, so that
    no copy in oneDNN's layout is kept. With AVX-512 BF16 and no AMX it leads oneDNN's bfloat16
    matmul on each projection of SmolLM2 at 512 rows (a prompt chunk) by 9-16% (425-449
    against 374-413 GFLOP/s), at 128 by 14-24%, and at 32 rows over every projection by 1.3×;
    with AMX, oneDNN's AMX matmul leads from a few rows."""
    return native_bf16() and "amx_bf16" not in cpu_flags()


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    invariant: bool = False,
    long_input: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    row_sums: torch.Tensor | None = None,
) -> torch.Tensor:
    """x [M, K] @ weight [N, K]^T (+ bias) -> [M, N] in out_dtype (default: x's dtype).

    A float32 x meets a bfloat16 weight in float32 arithmetic (the weight widens exactly); a
    bfloat16 x meets it in the CPU's bfloat16 matmul where it has one.
    invariant: every row's result is the same whatever M is. The small-batch kernel reduces
    each row in one fixed order at any M; a matmul library picks its blocking (and with it
    the rounding) by M, so past small_batch_rows the fast path can give a row other low bits
    in a larger batch.
    long_input: what longer inputs multiply instead of the weight (long_input_weight).
    scale, row_sums: an int8 weight's per-row scales and sums, the weight packed (packing.pack_int8;
    its values are unpack_rows(weight, N, K) * scale[:, None]); its kernel rounds each row of x
    to int16 (2^-15 of the row's largest magnitude) and sums exactly in integers; without the
    kernels, and past its rows, x multiplies long_input.
    """
    kernels = extension()
    small = invariant or x.shape[0] <= small_batch_rows(weight)
    out_dtype = out_dtype or x.dtype
    if weight.dtype == torch.int8:
        if kernels is not None and small:
            return kernels.int8_linear(x, weight, row_sums, scale, bias, out_dtype)
        # long_input holds the rounded weight: packed for the bfloat16 kernel, which then takes
        # every longer input (no oneDNN copy is kept beside it), or as the matmul below takes it.
        weight, long_input = long_input, None
        if weight.dim() == 4:
            return kernels.packed_bf16_linear(x, weight, bias, out_dtype)
    elif weight.dim() == 4:
        # Packed (packing.small_batch_weight): long_input, where kept, holds the values for long
        # bfloat16 inputs.
        if kernels is not None and (small or long_input is None or x.dtype != torch.bfloat16):
            return kernels.packed_bf16_linear(x, weight, bias, out_dtype)
        weight, long_input = long_input, None
    elif kernels is not None and small:
        return kernels.small_batch_linear(x, weight, bias, out_dtype)
    widen = x.dtype == torch.float32 or not native_bf16()
    if weight.dtype == torch.bfloat16 and widen and not weight.is_mkldnn:
        wide = long_input is not None and long_input.dtype == torch.float32
        matrix = long_input if wide else weight.float()
    else:
        matrix = weight if long_input is None else long_input
    # The input and bias meet the matrix in its dtype: an int8 weight's copy is float32 where
    # the CPU has no bfloat16 matmul, whatever the activations are.
    x, bias = x.to(matrix.dtype), None if bias is None else bias.to(matrix.dtype)
    if matrix.is_mkldnn:
        y = torch.ops.mkldnn._linear_pointwise(x, matrix, bias, "none", [], "")
    else:
        y = F.linear(x, matrix, bias)
    return y.to(out_dtype)


def long_input_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """What inputs past small_batch_rows (prompt chunks, larger batches) multiply instead of a
    bfloat16 weight, built once at load; None for the weight itself. The small-batch kernel
    and the batch-invariant mode keep reading the weight.

    Where the CPU has no bfloat16 matmul, emulated ones are 6× slower than float32 ones on the
    same, exactly widened, values, so the copy holds the float32 values. Where it has one, the
    copy holds the same bfloat16 values. Either way it is laid out in oneDNN's blocked format
    where torch has oneDNN, which saves the matmul reordering the weight on every call: 1.2-1.7×
    MKL's float32 matmul on the plain layout at 40-512 rows on AVX2, 1.3-2× oneDNN's bfloat16
    one at 1-256 rows on AMX (docs/benchmarks.md). float32 weights keep no copy: it would
    double their memory.
    """
    if weight.dtype != torch.bfloat16:
        return None
    laid_out = onednn_layout(weight if native_bf16() else weight.float())
    return None if laid_out is weight else laid_out


def onednn_layout(values: torch.Tensor) -> torch.Tensor:
    """A weight in oneDNN's blocked layout for its matmul, where torch has oneDNN."""
    if torch.backends.mkldnn.is_available():
        return torch.ops.mkldnn._reorder_linear_weight(values)
    return values


def add_rms_norm(
    hidden: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> torch.Tensor:
    """hidden += delta in place (the residual stream), then RMSNorm(hidden) * weight."""
    kernels = extension()
    if kernels is not None:
        return kernels.add_rms_norm(hidden, delta, weight, eps)
    if delta is not None:
        hidden.add_(delta)
    x32 = hidden.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(hidden.dtype)


def rope_in_place(
    x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, heads: int, head_dim: int
) -> None:
    """Rotates the first `heads` heads of each row of x ([tokens, width]) by its position;
    cos_sin is [2, max_len, head_dim] float32."""
    kernels = extension()
    if kernels is not None:
        kernels.rope_in_place(x, positions, cos_sin, heads, head_dim)
        return
    rows = x[:, : heads * head_dim].unflatten(1, (heads, head_dim))
    cos, sin = (t.unsqueeze(1) for t in cos_sin[:, positions])
    half = head_dim // 2
    rotated = torch.cat((-rows[..., half:], rows[..., :half]), dim=-1)
    rows.copy_(rows * cos + rotated * sin)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[tokens, 2 * size] -> SiLU(gate) * up, [tokens, size]."""
    kernels = extension()
    if kernels is not None:
        return kernels.silu_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def quantize_kv(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., head_dim] rounded to int8 with a float32 scale per row, as write_kv stores them
    in an int8 cache: x * (127 / max |x|) to the nearest integer, scale max |x| / 127 (1 where
    the row is all zeros)."""
    x = x.float()
    amax = x.abs().amax(-1, keepdim=True)
    # A tensor divided, not a number: `127 / amax` is computed as 127 * (1 / amax).
    inverse = torch.where(amax > 0, torch.full_like(amax, 127) / amax, torch.zeros_like(amax))
    step = torch.where(amax > 0, amax / 127, torch.ones_like(amax)).squeeze(-1)
    return torch.round(x * inverse).clamp(-127, 127).to(torch.int8), step


def write_kv(
    cache: LayerCache,
    k: torch.Tensor,
    v: torch.Tensor,
    slot_blocks: torch.Tensor,
    slot_offsets: torch.Tensor,
) -> None:
    """Store k and v ([tokens, kv_heads, head_dim]) at their slots (layouts in kv_cache.py),
    rounded with their scales in an int8 cache."""
    kernels = extension()
    if kernels is not None:
        kernels.write_kv(k, v, *cache, slot_blocks, slot_offsets)
        return
    if cache.key_scales is not None and cache.value_scales is not None:
        k, key_scales = quantize_kv(k)
        v, value_scales = quantize_kv(v)
        cache.key_scales[:, slot_blocks, slot_offsets] = key_scales.T
        cache.value_scales[:, slot_blocks, slot_offsets] = value_scales.T
    group = cache.keys.shape[-1]
    keys_by_position(cache.keys)[:, slot_blocks, slot_offsets] = k.unflatten(
        -1, (-1, group)
    ).transpose(0, 1)
    cache.values[:, slot_blocks, slot_offsets] = v.transpose(0, 1)


def apply_token_bitmask(logits: torch.Tensor, rows: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set to -inf, in place, the logits of row rows[i] whose bit is clear in bitmask[i]
    (int32 words, bit j of word w for token 32 w + j)."""
    kernels = extension()
    if kernels is not None:
        kernels.apply_token_bitmask(logits, rows, bitmask)
        return
    vocab = logits.shape[1]
    bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, count=vocab, bitorder="little")
    banned = torch.from_numpy(bits) == 0
    logits[rows] = logits[rows].masked_fill(banned, float("-inf"))
