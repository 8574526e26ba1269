"""Memory in huge pages: packed weights' copies and the KV cache, each in one mapping that
Linux is asked to back with 2 MiB pages."""

import itertools
from pathlib import Path

import pytest
import torch

from ragserve.engine import memory
from ragserve.engine.kv_cache import KVCache
from tests.engine.helpers import mapping_field, mapping_flags

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled").exists()


def test_weights_move_into_one_mapping_asked_for_huge_pages():
    torch.manual_seed(0)
    tensors = [
        torch.randn(40, 96).to(torch.bfloat16),
        torch.randint(-128, 128, (3, 7), dtype=torch.int8),
        torch.randn(5),
    ]
    moved = memory.in_huge_pages(tensors)
    for original, copy in zip(tensors, moved, strict=True):
        assert torch.equal(copy, original) and copy.is_contiguous()
        assert copy.data_ptr() != original.data_ptr() and copy.data_ptr() % 64 == 0
    assert moved[0].data_ptr() % memory.HUGE_PAGE == 0
    assert moved[1].data_ptr() == moved[0].data_ptr() + tensors[0].nbytes
    if THP:
        assert "hg" in mapping_flags(moved[0].data_ptr())
    assert memory.in_huge_pages([]) == []


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int8])
def test_the_kv_cache_lies_zeroed_in_one_mapping_asked_for_huge_pages(dtype):
    cache = KVCache(
        num_layers=2, num_kv_heads=3, head_dim=8, num_blocks=5, block_size=4, dtype=dtype
    )
    group = 4 if dtype == torch.int8 else 1
    assert cache.keys.shape == (2, 3, 5, 8 // group, 4, group)
    assert cache.values.shape == (2, 3, 5, 4, 8)
    parts = [
        t for t in (cache.keys, cache.values, cache.key_scales, cache.value_scales) if t is not None
    ]
    assert len(parts) == (4 if dtype == torch.int8 else 2)
    assert cache.keys.data_ptr() % memory.HUGE_PAGE == 0
    for before, after in itertools.pairwise(parts):
        assert after.data_ptr() == before.data_ptr() + -(-before.nbytes // 64) * 64
    assert not any(part.any() for part in parts)
    # Written at start: resident before any block is used.
    resident_kib = int(mapping_field(cache.keys.data_ptr(), "Rss")[0])
    assert resident_kib * 1024 >= cache.nbytes
    assert cache.nbytes == sum(part.nbytes for part in parts)
    if THP:
        assert "hg" in mapping_flags(cache.keys.data_ptr())
