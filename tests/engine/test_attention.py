"""The decode kernel against the PyTorch path and a plain reference, on scattered blocks."""

import pytest
import torch

from ragserve.engine.attention import (
    AttentionMetadata,
    gather_context,
    gathered_decode_attention,
)
from ragserve.engine.kernels import extension


def reference(q, keys, values, scale):
    """Per sequence: q [heads, dim], keys/values [kv_heads, len, dim]."""
    group = q.shape[0] // keys.shape[0]
    keys = keys.repeat_interleave(group, 0).float()
    values = values.repeat_interleave(group, 0).float()
    scores = torch.einsum("hd,hld->hl", q.float(), keys) * scale
    return torch.einsum("hl,hld->hd", torch.softmax(scores, -1), values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("block_size", "head_dim"), [(16, 64), (8, 32)])
def test_decode_paths_agree(dtype, block_size, head_dim):
    torch.manual_seed(0)
    kv_heads, heads, num_blocks = 2, 6, 64
    k_cache = torch.randn(kv_heads, num_blocks, head_dim, block_size).to(dtype)
    v_cache = torch.randn(kv_heads, num_blocks, block_size, head_dim).to(dtype)
    lens = torch.tensor([1, block_size, 3 * block_size + 5, 70])
    max_blocks = -(-int(lens.max()) // block_size)
    tables = torch.randperm(num_blocks)[: len(lens) * max_blocks].view(len(lens), max_blocks)
    q = torch.randn(len(lens), heads, head_dim).to(dtype)
    meta = AttentionMetadata(None, None, len(lens), tables, lens, [])
    scale = head_dim**-0.5
    gathered = gathered_decode_attention(q, k_cache, v_cache, meta, scale)
    kernel = extension()
    assert kernel is not None, "the C++ kernel must build on this machine"
    fast = kernel.paged_decode_attention(q, k_cache, v_cache, tables, lens, scale)
    for i, length in enumerate(lens.tolist()):
        keys, values = gather_context(k_cache, v_cache, tables[i], length)
        expected = reference(q[i], keys, values, scale)
        torch.testing.assert_close(fast[i], expected, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(gathered[i].float(), expected, atol=1e-4, rtol=1e-4)
