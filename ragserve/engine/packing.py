"""How the linear kernels lay weights out in memory: bfloat16 ones in blocks of sixteen rows by
pairs of columns (csrc/packed_bf16_linear.cpp), int8 ones in tiles of rows, each tile one
sequential stream (csrc/int8_linear.cpp). The model puts both in huge pages (memory.py)."""

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
