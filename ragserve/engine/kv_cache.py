"""The KV cache tensors: per layer, keys and values for every block.

Keys are stored [kv_heads, blocks, head_dim, block_size] and values
[kv_heads, blocks, block_size, head_dim]: a decode reads one block of keys as head_dim runs
of block_size lanes (the query-key products become vector multiply-adds with no transpose),
and one block of values as block_size rows to accumulate.
"""

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


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
        # Zero-filled, not empty: padded reads touch unused positions, which must be finite.
        self.keys = torch.zeros(
            (num_layers, num_kv_heads, num_blocks, head_dim, block_size), dtype=dtype
        )
        self.values = torch.zeros(
            (num_layers, num_kv_heads, num_blocks, block_size, head_dim), dtype=dtype
        )

    @property
    def num_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[index], self.values[index]

    @property
    def nbytes(self) -> int:
        return 2 * self.keys.numel() * self.keys.element_size()
