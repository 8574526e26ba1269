"""Paged attention: the kernel and the PyTorch path against a plain reference on scattered
blocks, and the kernel's batch invariance (a token's output, bit for bit, does not depend on
the tokens computed with it), for float32, bfloat16 and int8 caches."""

import pytest
import torch

from ragserve.engine import attention, kernels
from ragserve.engine.attention import (
    AttentionMetadata,
    gather_context,
    gathered_attention,
    paged_attention,
    rounded_queries,
)
from ragserve.engine.kernels import extension, quantize_kv
from ragserve.engine.kv_cache import LayerCache, key_group

# The cache formats: float32 and bfloat16 (queries in the same dtype), int8 (bfloat16 queries).
FORMATS = [torch.float32, torch.bfloat16, torch.int8]


def reference(q, keys, values, scale):
    """One token: q [heads, dim], keys/values [kv_heads, len, dim]."""
    group = q.shape[0] // keys.shape[0]
    keys = keys.repeat_interleave(group, 0).float()
    values = values.repeat_interleave(group, 0).float()
    scores = torch.einsum("hd,hld->hl", q.float(), keys) * scale
    return torch.einsum("hl,hld->hd", torch.softmax(scores, -1), values)


def kernel():
    kernels = extension()
    assert kernels is not None, "the C++ kernels must build on this machine"
    return kernels


def query_dtype(cache_dtype):
    return torch.bfloat16 if cache_dtype == torch.int8 else cache_dtype


def in_layout(keys, values, dtype) -> LayerCache:
    """Keys and values by position ([kv_heads, blocks, block_size, head_dim]) as a cache of
    dtype holds them (kv_cache.py); an int8 cache's rounded as write_kv rounds them (a scale per
    position and kv head)."""
    key_scales = value_scales = None
    if dtype == torch.int8:
        keys, key_scales = quantize_kv(keys)
        values, value_scales = quantize_kv(values)
    grouped = keys.unflatten(-1, (-1, key_group(dtype))).transpose(-3, -2)
    return LayerCache(grouped.contiguous().to(dtype), values.to(dtype), key_scales, value_scales)


def random_cache(dtype, block_size, head_dim, kv_heads=2, num_blocks=96) -> LayerCache:
    shape = (kv_heads, num_blocks, block_size, head_dim)
    return in_layout(torch.randn(shape), torch.randn(shape), dtype)


def expected_output(q, cache, table, length, scale):
    """The reference over the keys and values the cache holds (an int8 cache's times their
    scales), with q rounded as the kernel rounds it against an int8 cache."""
    keys, values = gather_context(cache, table, length)
    if cache.key_scales is not None:
        return reference(rounded_queries(q, scale), keys, values, 1.0)
    return reference(q, keys, values, scale)


def metadata(tables, spans):
    """spans: (table row, first position, tokens) per sequence, in batch order."""
    seqs, lens = [], []
    for row, start, count in spans:
        seqs += [row] * count
        lens += list(range(start + 1, start + count + 1))
    return AttentionMetadata(None, None, tables, torch.tensor(seqs), torch.tensor(lens))


def attend(q, cache, tables, spans, scale):
    meta = metadata(tables, spans)
    return kernel().paged_attention(
        q, *cache, meta.block_tables, meta.token_seqs, meta.token_lens, scale, torch.float32
    )


@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.parametrize(("block_size", "head_dim"), [(16, 64), (8, 32)])
def test_kernel_and_pytorch_path_match_the_reference(dtype, block_size, head_dim):
    """Against the reference (expected_output)."""
    torch.manual_seed(0)
    heads = 6
    cache = random_cache(dtype, block_size, head_dim)
    # Two decodes, a prompt from its start, a chunk after cached positions, a long decode.
    spans = [(0, 0, 1), (1, block_size - 1, 1), (2, 0, 11), (3, 3 * block_size + 2, 21), (4, 69, 1)]
    max_blocks = -(-max(start + count for _, start, count in spans) // block_size)
    tables = torch.randperm(96)[: len(spans) * max_blocks].view(len(spans), max_blocks)
    meta = metadata(tables, spans)
    q = torch.randn(len(meta.token_seqs), heads, head_dim).to(query_dtype(dtype))
    scale = head_dim**-0.5
    fast = attend(q, cache, tables, spans, scale)
    gathered = gathered_attention(q, cache, meta, scale)
    for token, (row, length) in enumerate(zip(meta.token_seqs, meta.token_lens, strict=True)):
        expected = expected_output(q[token], cache, tables[row], int(length), scale)
        torch.testing.assert_close(fast[token], expected, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(gathered[token], expected, atol=1e-4, rtol=1e-4)


def test_an_int8_cache_stays_close_to_the_values_it_rounded():
    """What rounding the cache costs: every output within a few hundredths of attention over the
    unrounded keys and values (outputs are averages of values of size ~1)."""
    torch.manual_seed(5)
    heads, head_dim, block_size, length = 6, 64, 16, 200
    shape = (2, 96, block_size, head_dim)
    keys, values = torch.randn(shape), torch.randn(shape)
    exact = in_layout(keys, values, torch.float32)
    rounded = in_layout(keys, values, torch.int8)
    tables = torch.randperm(96)[:13].view(1, 13)
    spans = [(0, 0, length)]
    q = torch.randn(length, heads, head_dim)
    reference_out = attend(q, exact, tables, spans, head_dim**-0.5)
    int8_out = attend(q.bfloat16(), rounded, tables, spans, head_dim**-0.5)
    bf16_out = attend(
        q.bfloat16(), in_layout(keys, values, torch.bfloat16), tables, spans, head_dim**-0.5
    )
    int8_error = (int8_out - reference_out).abs().max()
    assert int8_error < 0.05
    # The same order as rounding to bfloat16 (8 bits of mantissa there, 7 bits and a sign here).
    assert int8_error < 4 * (bf16_out - reference_out).abs().max()


@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.parametrize(("block_size", "head_dim"), [(16, 64), (8, 32)])
def test_a_tokens_output_does_not_depend_on_its_batch(dtype, block_size, head_dim):
    torch.manual_seed(1)
    heads, length = 6, 45
    cache = random_cache(dtype, block_size, head_dim)
    tables = torch.randperm(96)[:30].view(5, 6)
    q = torch.randn(length, heads, head_dim).to(query_dtype(dtype))
    scale = head_dim**-0.5
    whole = attend(q, cache, tables, [(0, 0, length)], scale)
    # The same prompt in chunks of 7 (tiles cut elsewhere), then token by token as decodes.
    chunks = [(0, start, min(7, length - start)) for start in range(0, length, 7)]
    chunked = attend(q, cache, tables, chunks, scale)
    assert torch.equal(chunked, whole)
    for position in (0, 13, length - 1):
        alone = attend(q[position : position + 1], cache, tables, [(0, position, 1)], scale)
        assert torch.equal(alone[0], whole[position])
    # Inside a batch with other sequences' decodes and chunks around it.
    others = torch.randn(9, heads, head_dim).to(q.dtype)
    mixed_q = torch.cat([others[:3], q, others[3:]])
    spans = [(1, 30, 1), (2, 4, 1), (3, 60 // 2, 1), (0, 0, length), (4, 10, 6)]
    mixed = attend(mixed_q, cache, tables, spans, scale)
    assert torch.equal(mixed[3 : 3 + length], whole)


@pytest.mark.parametrize("dtype", FORMATS)
def test_threads_taking_tiles_in_any_order_change_no_bit(dtype):
    """A long prompt's tiles differ in cost and go to threads largest first; the result must be
    the one a single thread computes, bit for bit, and the reference's within tolerance."""
    torch.manual_seed(2)
    heads, head_dim, block_size, length = 6, 64, 16, 300
    cache = random_cache(dtype, block_size, head_dim)
    tables = torch.randperm(96)[:60].view(3, 20)
    spans = [(1, 100, 1), (0, 0, length), (2, 250, 5)]
    q = torch.randn(length + 6, heads, head_dim).to(query_dtype(dtype))
    scale = head_dim**-0.5
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = attend(q, cache, tables, spans, scale)
        torch.set_num_threads(max(2, threads))
        shared = attend(q, cache, tables, spans, scale)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(shared, single)
    meta = metadata(tables, spans)
    for token in (0, 1, 150, length, length + 5):
        row, length_seen = int(meta.token_seqs[token]), int(meta.token_lens[token])
        expected = expected_output(q[token], cache, tables[row], length_seen, scale)
        torch.testing.assert_close(shared[token], expected, atol=1e-4, rtol=1e-4)


def test_a_windowed_layer_reads_only_its_window():
    """A sliding-window layer (Gemma 3) reads a token's last `window` positions only: keys and
    values before them may change without changing its output; without a window they count."""
    torch.manual_seed(0)
    heads, kv_heads, dim, block = 2, 1, 8, 16
    length = 40
    cache = random_cache(torch.float32, block, dim, kv_heads, num_blocks=4)
    meta = AttentionMetadata(
        slot_blocks=torch.zeros(1, dtype=torch.int64),
        slot_offsets=torch.zeros(1, dtype=torch.int64),
        block_tables=torch.arange(4).unsqueeze(0),
        token_seqs=torch.zeros(1, dtype=torch.int64),
        token_lens=torch.tensor([length]),
    )
    q = torch.randn(1, heads, dim)
    windowed = gathered_attention(q, cache, meta, 1.0, window=10)
    # Changing keys and values outside the window changes nothing.
    cache.keys[:, 0] = torch.randn(kv_heads, dim, block, 1)
    cache.values[:, 0] = torch.randn(kv_heads, block, dim)
    assert torch.equal(windowed, gathered_attention(q, cache, meta, 1.0, window=10))
    assert not torch.equal(windowed, gathered_attention(q, cache, meta, 1.0))


@pytest.mark.parametrize("dtype", FORMATS)
def test_a_layers_attention_in_one_call_stores_then_attends_as_its_parts_do(dtype, monkeypatch):
    """attention.paged_attention from fused qkv rows: the kernel's one call (store, attend,
    output in qkv's dtype) against its two parts and a conversion afterwards, bit for bit, and
    the PyTorch path within tolerance; both leave the same cache."""
    torch.manual_seed(7)
    heads, kv_heads, head_dim, block_size = 6, 2, 32, 8
    spans = [(0, 0, 5), (1, 20, 1), (2, 9, 3)]
    tables = torch.randperm(96)[:12].view(3, 4)
    base = metadata(tables, spans)
    positions = base.token_lens - 1
    meta = AttentionMetadata(
        tables[base.token_seqs, positions // block_size],
        positions % block_size,
        tables,
        base.token_seqs,
        base.token_lens,
    )
    width = (heads + 2 * kv_heads) * head_dim
    # Rows of a wider tensor, as the fused projection's output may be sliced.
    qkv = torch.randn(len(positions), width + 16).to(query_dtype(dtype))[:, :width]
    scale = head_dim**-0.5
    cache = random_cache(dtype, block_size, head_dim, kv_heads)
    caches = [LayerCache(*(None if t is None else t.clone() for t in cache)) for _ in range(3)]
    one_call = paged_attention(qkv, heads, kv_heads, caches[0], meta, scale)
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
    view = lambda x: x.view(len(positions), -1, head_dim)  # noqa: E731
    kernels.write_kv(caches[1], view(k), view(v), meta.slot_blocks, meta.slot_offsets)
    parts = attend(view(q), caches[1], tables, spans, scale).flatten(1).to(qkv.dtype)
    assert one_call.dtype == qkv.dtype and one_call.shape == (len(positions), heads * head_dim)
    assert torch.equal(one_call, parts)
    for ours, theirs in zip(caches[0], caches[1], strict=True):
        assert ours is theirs is None or torch.equal(ours, theirs)
    monkeypatch.setattr(attention, "extension", lambda: None)
    pytorch_path = paged_attention(qkv, heads, kv_heads, caches[2], meta, scale)
    assert pytorch_path.dtype == qkv.dtype
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(pytorch_path.float(), one_call.float(), atol=tolerance, rtol=0)
    for ours, theirs in zip(caches[0], caches[2], strict=True):
        assert ours is theirs is None or torch.equal(ours, theirs)
