"""Attention over the paged KV cache for a flattened batch of prefill chunks and decodes.

Decodes (one query each) run in a C++ kernel that reads keys and values straight from their
blocks (csrc/paged_attention.cpp, see kernels.py). Where no compiler is available, a
PyTorch path gathers the context into a padded tensor instead: same result, more memory
traffic. Each prefill chunk attends with SDPA over its gathered context, causal with an offset
when earlier tokens are already cached. Cache layouts are described in kv_cache.py.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ragserve.engine.kernels import extension, write_kv


@dataclass
class PrefillSpan:
    start: int
    end: int
    block_ids: torch.Tensor
    context_len: int
    # [chunk, context] True where a query may attend; None when the chunk starts the sequence.
    mask: torch.Tensor | None


@dataclass
class AttentionMetadata:
    # Where each new token's key and value go.
    slot_blocks: torch.Tensor
    slot_offsets: torch.Tensor
    num_decodes: int
    # [decodes, max_blocks] block ids (padded with 0) and [decodes] context lengths, int64.
    decode_block_tables: torch.Tensor
    decode_context_lens: torch.Tensor
    prefills: list[PrefillSpan]


def gather_context(
    k_cache: torch.Tensor, v_cache: torch.Tensor, block_ids: torch.Tensor, length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of the blocks in block_ids ([..., blocks]) as [kv_heads, ..., length,
    head_dim]."""
    num_kv_heads, _, head_dim, block_size = k_cache.shape
    shape = (num_kv_heads, *block_ids.shape[:-1], block_ids.shape[-1] * block_size, head_dim)
    keys = k_cache[:, block_ids].transpose(-1, -2).reshape(shape)[..., :length, :]
    values = v_cache[:, block_ids].reshape(shape)[..., :length, :]
    return keys, values


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    kernels = extension()
    if kernels is None:
        return gathered_decode_attention(q, k_cache, v_cache, meta, scale)
    return kernels.paged_decode_attention(
        q, k_cache, v_cache, meta.decode_block_tables, meta.decode_context_lens, scale
    )


def gathered_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[0]
    group = num_heads // num_kv_heads
    lens = meta.decode_context_lens
    max_len = int(lens.max())
    keys, values = gather_context(k_cache, v_cache, meta.decode_block_tables, max_len)
    padding = torch.arange(max_len) >= lens.unsqueeze(1)
    bias = torch.zeros(num_seqs, max_len).masked_fill_(padding, -torch.inf)
    # [kv_heads, seqs, group, dim] against [kv_heads, seqs, len, dim]
    q = q.view(num_seqs, num_kv_heads, group, head_dim).transpose(0, 1).float()
    scores = torch.matmul(q, keys.float().transpose(-1, -2)).mul_(scale)
    scores.add_(bias[None, :, None, :])
    out = torch.matmul(torch.softmax(scores, dim=-1), values.float())
    return out.transpose(0, 1).reshape(num_seqs, num_heads, head_dim)


def prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    span: PrefillSpan,
    scale: float,
) -> torch.Tensor:
    keys, values = gather_context(k_cache, v_cache, span.block_ids, span.context_len)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0),
        keys.unsqueeze(0),
        values.unsqueeze(0),
        attn_mask=span.mask,
        is_causal=span.mask is None,
        scale=scale,
        enable_gqa=True,
    )
    return out.squeeze(0).transpose(0, 1)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """q [tokens, heads, dim], k and v [tokens, kv_heads, dim] -> [tokens, heads, dim]."""
    write_kv(k_cache, v_cache, k, v, meta.slot_blocks, meta.slot_offsets)
    out = torch.empty_like(q)
    if meta.num_decodes:
        out[: meta.num_decodes] = decode_attention(
            q[: meta.num_decodes], k_cache, v_cache, meta, scale
        )
    for span in meta.prefills:
        out[span.start : span.end] = prefill_attention(
            q[span.start : span.end], k_cache, v_cache, span, scale
        )
    return out
