"""How the linear kernels lay weights out in memory: bfloat16 ones in blocks of sixteen rows by
pairs of columns (csrc/packed_bf16_linear.cpp), int8 ones in tiles of rows, each tile one
sequential stream (csrc/int8_linear.cpp), and both in huge pages."""

import contextlib
import ctypes
import mmap

import torch

from ragserve.engine.config import native_bf16
from ragserve.engine.kernels import extension

# The int8 layout (pack_rows): rows interleaved in tiles of this many, each row a chunk of
# columns at a time (one AVX-512 vector of int8 values), so that a tile is one sequential stream.
TILE_ROWS = 4
INT8_CHUNK = 64
# The bfloat16 layout (pack_pairs): this many rows (outputs) per block, one AVX-512 vector per
# pair of columns.
PAIR_BLOCK = 16
HUGE_PAGE = 2 << 20


def pack_rows(values: torch.Tensor, chunk: int) -> torch.Tensor:
    """A weight [N, K] as the packed kernels read it: tiles of TILE_ROWS rows, each `chunk`
    columns of the tile's first row, then of its second, and so on ([tiles, chunks, TILE_ROWS,
    chunk]), zero-padded to whole tiles and chunks."""
    n, k = values.shape
    rows = -(-n // TILE_ROWS) * TILE_ROWS
    columns = -(-k // chunk) * chunk
    padded = torch.zeros(rows, columns, dtype=values.dtype)
    padded[:n, :k] = values
    tiles = padded.view(rows // TILE_ROWS, TILE_ROWS, columns // chunk, chunk)
    return tiles.transpose(1, 2).contiguous()


def unpack_rows(packed: torch.Tensor, n: int | None = None, k: int | None = None) -> torch.Tensor:
    """The [N, K] weight that pack_rows packed (default: all its padded rows and columns)."""
    tiles, chunks, _, chunk = packed.shape
    rows = packed.transpose(1, 2).reshape(tiles * TILE_ROWS, chunks * chunk)
    return rows[:n, :k]


def pack_pairs(values: torch.Tensor) -> torch.Tensor:
    """A weight [N, K] (N a multiple of PAIR_BLOCK, K even) as the bfloat16 kernel reads it:
    [N / PAIR_BLOCK, K / 2, PAIR_BLOCK, 2], for each block of rows its columns two at a time."""
    n, k = values.shape
    return values.view(n // PAIR_BLOCK, PAIR_BLOCK, k // 2, 2).transpose(1, 2).contiguous()


def unpack_pairs(packed: torch.Tensor) -> torch.Tensor:
    """The [N, K] weight that pack_pairs packed."""
    blocks, pairs, _, _ = packed.shape
    return packed.transpose(1, 2).reshape(blocks * PAIR_BLOCK, pairs * 2)


def pack_int8(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An int8 weight [N, K] as the int8 kernel reads it (pack_rows, INT8_CHUNK columns at a
    time), and the padded rows' int32 sums."""
    packed = pack_rows(values, INT8_CHUNK)
    return packed, unpack_rows(packed).sum(dim=1, dtype=torch.int32)


def small_batch_weight(weight: torch.Tensor, long_input: torch.Tensor | None) -> torch.Tensor:
    """The weight as the small-batch kernels read it. A bfloat16 one is packed (pack_pairs)
    where the CPU has bfloat16 dot products, the kernels are built, long inputs have a layout of
    their own (long_input; Projection.of drops it where the packed kernel takes every length),
    and the shape blocks whole (figures in kernels.py). A tied embedding keeps its plain matrix
    for lookups beside the packed copy."""
    if (
        weight.dtype != torch.bfloat16
        or long_input is None
        or not native_bf16()
        or weight.shape[0] % PAIR_BLOCK
        or weight.shape[1] % 2
        or extension() is None
    ):
        return weight
    return pack_pairs(weight)


def in_huge_pages(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Copies of the tensors, one after another in one anonymous mapping that Linux is asked to
    back with 2 MiB pages (transparent huge pages; where they are off, ordinary pages). The
    small-batch kernels stream every weight once per step, and with 4 KiB pages each page is a
    TLB miss and a stop for the hardware prefetcher: on an AMD EPYC with AVX-512 BF16 (family
    25) a one-row pass over SmolLM2's packed projections took 6.4 ms in huge pages against 8.2
    (bfloat16) and 5.6 against 6.5 (int8), alternating in one process."""
    if not tensors:
        return []
    starts, total = [], 0
    for tensor in tensors:
        starts.append(total)
        total += -(-tensor.nbytes // 64) * 64
    # Private: Linux gives shared anonymous memory huge pages only where shmem has them on.
    arena = mmap.mmap(-1, total + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        arena.madvise(mmap.MADV_HUGEPAGE)
    memory = torch.frombuffer(arena, dtype=torch.uint8)
    # The first huge-page boundary inside the mapping (mmap aligns to 4 KiB only).
    first = -memory.data_ptr() % HUGE_PAGE
    return [
        memory[first + start : first + start + tensor.nbytes]
        .view(tensor.dtype)
        .view(tensor.shape)
        .copy_(tensor)
        for tensor, start in zip(tensors, starts, strict=True)
    ]


def release_freed_memory() -> None:
    """Hands the freed pages of the C heap back to the OS (glibc's malloc_trim; elsewhere,
    nothing). Loading frees the plain, padded and copied weights it built on the way to the
    packed ones, and glibc kept most of them: the default model's engine held 3,234 MiB after
    loading and 2,963 MiB after this."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)
