"""KV block accounting: block tables, reference counts and the automatic prefix cache.

A full block is published under a chained hash (parent hash, token ids, and the salts the
sequence's CacheSalt puts on that block) once its keys and values have been computed, never
before, so a request can only hit blocks that hold data.
Blocks whose reference count drops to zero keep their hash and stay reusable until the LRU
free list hands them out again.
"""

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ragserve.engine.cache_salt import CacheSalt
from ragserve.engine.sequence import Sequence


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    hash: bytes | None = None


def root_hash(cache_salt: str, batch_invariant: bool = False) -> bytes:
    # Blocks computed in the batch-invariant mode hold other low bits than the fast mode's, so
    # each mode only matches its own: a cached prefix must be what the request would compute.
    mode = b"invariant\0" if batch_invariant else b""
    return hashlib.sha256(b"ragserve-prefix\0" + mode + cache_salt.encode()).digest()


def extend_block_hashes(
    hashes: list[bytes],
    token_ids: list[int],
    cache_salt: CacheSalt,
    block_size: int,
    batch_invariant: bool,
    num_blocks: int,
) -> list[bytes]:
    """The hashes of the first num_blocks full blocks of token_ids, under which the prefix
    cache publishes them; hashes holds those already computed and is extended in place."""
    while len(hashes) < num_blocks:
        i = len(hashes)
        parent = hashes[-1] if hashes else root_hash(cache_salt.base, batch_invariant)
        tokens = token_ids[i * block_size : (i + 1) * block_size]
        hashes.append(chain_hash(parent, tokens, cache_salt.for_block(i, block_size)))
    return hashes[:num_blocks]


def chain_hash(parent: bytes, token_ids: list[int], salt: str = "") -> bytes:
    # A full block's token bytes have a fixed length, so the salt after them is unambiguous.
    tokens = np.asarray(token_ids, dtype=np.int64).tobytes()
    return hashlib.sha256(parent + tokens + salt.encode()).digest()


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        # Insertion order is eviction order: least recently freed first.
        self.free_block_ids: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached_block_ids: dict[bytes, int] = {}
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _full_block_hashes(self, seq: Sequence, num_blocks: int) -> list[bytes]:
        return extend_block_hashes(
            seq.block_hashes,
            seq.token_ids,
            seq.cache_salt,
            self.block_size,
            seq.params.batch_invariant,
            num_blocks,
        )

    def _cached_prefix(self, seq: Sequence) -> list[int]:
        # Prompt log-probabilities need the logits of every prompt position computed.
        if not self.enable_prefix_caching or seq.params.prompt_logprobs is not None:
            return []
        # The last token is always recomputed: its logits are needed to sample.
        hits = []
        for block_hash in self._full_block_hashes(seq, (seq.num_tokens - 1) // self.block_size):
            block_id = self.cached_block_ids.get(block_hash)
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def can_allocate(self, seq: Sequence, reserve_tokens: int) -> bool:
        hits = self._cached_prefix(seq)
        shared = sum(1 for b in hits if self.blocks[b].ref_count > 0)
        needed = self.blocks_for(seq.num_tokens + reserve_tokens) - shared
        return needed <= self.num_free_blocks

    def allocate(self, seq: Sequence) -> None:
        """Give a waiting sequence blocks for all its tokens, reusing cached prefix blocks."""
        assert not seq.block_table
        hits = self._cached_prefix(seq)
        for block_id in hits:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free_block_ids[block_id]
            block.ref_count += 1
        seq.block_table = hits
        seq.num_published_blocks = len(hits)
        seq.num_computed_tokens = len(hits) * self.block_size
        if not seq.num_preemptions:
            seq.num_cached_tokens = seq.num_computed_tokens
        self.prefix_cache_queries += seq.num_tokens
        self.prefix_cache_hits += seq.num_computed_tokens
        self.append_slots(seq, 0)

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        needed = self.blocks_for(seq.num_tokens + num_new_tokens) - len(seq.block_table)
        return needed <= self.num_free_blocks

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> None:
        """Make room for the sequence's tokens plus num_new_tokens more."""
        while len(seq.block_table) < self.blocks_for(seq.num_tokens + num_new_tokens):
            seq.block_table.append(self._take_free_block())

    def publish_computed_blocks(self, seq: Sequence) -> None:
        """Offer the sequence's newly computed full blocks to later requests."""
        if not self.enable_prefix_caching:
            return
        num_full = min(seq.num_computed_tokens // self.block_size, len(seq.block_table))
        if num_full <= seq.num_published_blocks:
            return
        hashes = self._full_block_hashes(seq, num_full)
        for i in range(seq.num_published_blocks, num_full):
            block = self.blocks[seq.block_table[i]]
            # The same content may already be cached under another block; keep the first.
            if block.hash is None and hashes[i] not in self.cached_block_ids:
                block.hash = hashes[i]
                self.cached_block_ids[hashes[i]] = block.block_id
        seq.num_published_blocks = num_full

    def free(self, seq: Sequence) -> None:
        # Tail blocks are freed first so they are evicted before the shared prefix.
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_block_ids[block_id] = None
        seq.block_table = []
        seq.num_published_blocks = 0
        seq.num_computed_tokens = 0

    def _take_free_block(self) -> int:
        block_id, _ = self.free_block_ids.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash is not None:
            if self.cached_block_ids.get(block.hash) == block_id:
                del self.cached_block_ids[block.hash]
            block.hash = None
        block.ref_count = 1
        return block_id
