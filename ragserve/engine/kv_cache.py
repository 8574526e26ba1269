"""The KV cache tensors: per layer, keys and values for every block.

Keys are stored [kv_heads, blocks, head_dim / group, block_size, group] and values
[kv_heads, blocks, block_size, head_dim]: a block of keys is runs of `group` consecutive
dimensions, one run per position, so a decode reads it as vectors of block_size lanes (the
query-key products become vector multiply-adds with no transpose), and a block of values as
block_size rows to accumulate. A float cache's group is 1 (head_dim runs of block_size lanes);
an int8 cache's is 4, the four bytes one lane of an int8 dot-product instruction takes.

An int8 cache (kv_cache_dtype "int8") stores each position's key and value of a kv head as
int8 with a float32 scale each ([kv_heads, blocks, block_size]): 1 + 4 / head_dim bytes an
element instead of 2, so the pool holds about twice the tokens of a bfloat16 one and a decode
step reads half the bytes (csrc/paged_attention.cpp).
"""

from typing import NamedTuple

import torch

from ragserve.engine.memory import zeros_in_huge_pages

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def key_group(dtype: torch.dtype) -> int:
    """Consecutive dimensions of a position's key stored together (see above)."""
    return 4 if dtype == torch.int8 else 1


def keys_by_position(keys: torch.Tensor) -> torch.Tensor:
    """A view of keys ([..., head_dim / group, block_size, group]) as
    [..., block_size, head_dim / group, group]."""
    return keys.transpose(-3, -2)


class LayerCache(NamedTuple):
    """One layer's keys and values; the scales only for an int8 cache."""

    keys: torch.Tensor
    values: torch.Tensor
    key_scales: torch.Tensor | None = None
    value_scales: torch.Tensor | None = None


class KVCache:
    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        group = key_group(dtype)
        shapes = [
            (num_layers, num_kv_heads, num_blocks, head_dim // group, block_size, group),
            (num_layers, num_kv_heads, num_blocks, block_size, head_dim),
        ]
        dtypes = [dtype, dtype]
        if dtype == torch.int8:
            shapes += [(num_layers, num_kv_heads, num_blocks, block_size)] * 2
            dtypes += [torch.float32] * 2
        # Zero-filled, not empty: padded reads touch unused positions, which must be finite.
        # In huge pages: a decode step reads every sequence's blocks of every layer.
        self.keys, self.values, *scales = zeros_in_huge_pages(shapes, dtypes)
        self.key_scales: torch.Tensor | None = scales[0] if scales else None
        self.value_scales: torch.Tensor | None = scales[1] if scales else None

    @property
    def num_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def layer(self, index: int) -> LayerCache:
        if self.key_scales is None or self.value_scales is None:
            return LayerCache(self.keys[index], self.values[index])
        return LayerCache(
            self.keys[index], self.values[index], self.key_scales[index], self.value_scales[index]
        )

    @property
    def nbytes(self) -> int:
        scales = [s for s in (self.key_scales, self.value_scales) if s is not None]
        return sum(t.numel() * t.element_size() for t in [self.keys, self.values, *scales])
