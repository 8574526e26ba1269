"""Attention over the paged KV cache for a flattened batch of prefill chunks and decodes.

Every new token, prompt or decode, attends to the first `len` positions of its sequence (its
own position included). A C++ kernel (csrc/paged_attention.cpp, see kernels.py) reads keys and
values straight from their blocks, with the same arithmetic for every token whatever the batch,
chunking or prefix cache around it. Where no compiler is available, a PyTorch path gathers each
sequence's context and attends with SDPA: same result up to rounding, more memory traffic.
Cache layouts are described in kv_cache.py.
"""

import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ragserve.engine.kernels import extension, quantize_kv, write_kv
from ragserve.engine.kv_cache import LayerCache, keys_by_position


@dataclass
class AttentionMetadata:
    # Where each new token's key and value go.
    slot_blocks: torch.Tensor
    slot_offsets: torch.Tensor
    # [seqs, max_blocks] block ids of the step's sequences, padded with 0, int64.
    block_tables: torch.Tensor
    # Per new token, int64: its sequence's row in block_tables (a sequence's tokens are
    # consecutive) and how many positions it attends (its position + 1).
    token_seqs: torch.Tensor
    token_lens: torch.Tensor


def gather_context(
    cache: LayerCache, block_ids: torch.Tensor, length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of the blocks in block_ids ([blocks]) as [kv_heads, length, head_dim]
    (an int8 cache's times their scales, in float32)."""
    num_kv_heads, _, block_size, head_dim = cache.values.shape
    shape = (num_kv_heads, block_ids.shape[-1] * block_size, head_dim)
    keys = keys_by_position(cache.keys[:, block_ids]).reshape(shape)[:, :length]
    values = cache.values[:, block_ids].reshape(shape)[:, :length]
    if cache.key_scales is not None and cache.value_scales is not None:
        scales_shape = (num_kv_heads, shape[1], 1)
        key_scales = cache.key_scales[:, block_ids].reshape(scales_shape)[:, :length]
        value_scales = cache.value_scales[:, block_ids].reshape(scales_shape)[:, :length]
        return keys.float() * key_scales, values.float() * value_scales
    return keys, values


def rounded_queries(q: torch.Tensor, scale: float) -> torch.Tensor:
    """q * scale as the kernel scores it against an int8 cache, in float32: each head's row
    rounded to int8 with a scale of its own, as write_kv rounds keys, so that a score is an
    integer dot product times two scales."""
    q8, steps = quantize_kv(q.float() * scale)
    return q8.float() * steps.unsqueeze(-1)


def gathered_attention(
    q: torch.Tensor,
    cache: LayerCache,
    meta: AttentionMetadata,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """The PyTorch path: per sequence, gather its context once and attend with SDPA, each token
    masked to its own length (and, with a window, to its last `window` positions). Returns
    float32 [tokens, heads, head_dim]."""
    out = torch.empty(q.shape, dtype=torch.float32)
    if cache.key_scales is not None:
        q, scale = rounded_queries(q, scale), 1.0
    block_size = cache.values.shape[2]
    rows = itertools.groupby(enumerate(meta.token_seqs.tolist()), key=lambda item: item[1])
    for seq, group in rows:
        tokens = [index for index, _ in group]
        start, end = tokens[0], tokens[-1] + 1
        lens = meta.token_lens[start:end]
        length = int(lens.max())
        num_blocks = -(-length // block_size)
        keys, values = gather_context(cache, meta.block_tables[seq, :num_blocks], length)
        mask = torch.arange(length) < lens.unsqueeze(1)
        if window is not None:
            mask &= torch.arange(length) >= lens.unsqueeze(1) - window
        attended = F.scaled_dot_product_attention(
            q[start:end].transpose(0, 1).unsqueeze(0).float(),
            keys.unsqueeze(0).float(),
            values.unsqueeze(0).float(),
            attn_mask=mask,
            scale=scale,
            enable_gqa=True,
        )
        out[start:end] = attended.squeeze(0).transpose(0, 1)
    return out


def paged_attention(
    qkv: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    cache: LayerCache,
    meta: AttentionMetadata,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """A layer's attention from its fused q/k/v projection's rows ([tokens, (heads + 2 kv_heads)
    * head_dim], RoPE applied): [tokens, heads * head_dim] in qkv's dtype. The new keys and
    values are stored first, so each token reads its own from the cache.
    window: a sliding-window layer's span (a token attends to its last `window` positions);
    the kernel reads whole contexts, so a step with a longer one takes the PyTorch path."""
    kernels = extension()
    if kernels is not None and (window is None or int(meta.token_lens.max()) <= window):
        # One call for the store, the attention and the conversion (csrc/paged_attention.cpp).
        return kernels.attend(
            qkv,
            num_heads,
            num_kv_heads,
            *cache,
            meta.slot_blocks,
            meta.slot_offsets,
            meta.block_tables,
            meta.token_seqs,
            meta.token_lens,
            scale,
        )
    tokens, head_dim = qkv.shape[0], qkv.shape[1] // (num_heads + 2 * num_kv_heads)
    q, k, v = qkv.split([num_heads * head_dim, *[num_kv_heads * head_dim] * 2], dim=-1)
    write_kv(
        cache,
        k.view(tokens, num_kv_heads, head_dim),
        v.view(tokens, num_kv_heads, head_dim),
        meta.slot_blocks,
        meta.slot_offsets,
    )
    q = q.view(tokens, num_heads, head_dim)
    attended = gathered_attention(q, cache, meta, scale, window)
    return attended.reshape(tokens, num_heads * head_dim).to(qkv.dtype)
