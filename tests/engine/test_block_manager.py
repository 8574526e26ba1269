from dataclasses import replace

from ragserve.engine.block_manager import BlockManager
from ragserve.engine.cache_salt import CacheSalt
from tests.engine.helpers import make_seq


def computed(manager: BlockManager, seq) -> None:
    """Mark all of a sequence's tokens as computed, as a finished prefill would."""
    seq.num_computed_tokens = seq.num_tokens
    manager.publish_computed_blocks(seq)


def test_allocate_and_free_leak_nothing():
    manager = BlockManager(num_blocks=10, block_size=4, enable_prefix_caching=True)
    seqs = [make_seq(str(i), list(range(i, i + 9))) for i in range(3)]
    for seq in seqs:
        manager.allocate(seq)
        assert len(seq.block_table) == 3
    assert manager.num_free_blocks == 1
    for seq in seqs:
        computed(manager, seq)
        manager.free(seq)
    assert manager.num_free_blocks == 10
    assert all(b.ref_count == 0 for b in manager.blocks)


def test_prefix_hit_shares_blocks_within_a_salt_only():
    manager = BlockManager(num_blocks=20, block_size=4, enable_prefix_caching=True)
    prefix = list(range(100, 112))
    first = make_seq("a", [*prefix, 1, 2], salt="tenant-a")
    manager.allocate(first)
    computed(manager, first)
    same_tenant = make_seq("b", [*prefix, 3, 4], salt="tenant-a")
    manager.allocate(same_tenant)
    assert same_tenant.num_cached_tokens == 12
    assert same_tenant.block_table[:3] == first.block_table[:3]
    assert all(manager.blocks[b].ref_count == 2 for b in first.block_table[:3])
    other_tenant = make_seq("c", [*prefix, 3, 4], salt="tenant-b")
    manager.allocate(other_tenant)
    assert other_tenant.num_cached_tokens == 0
    assert not set(other_tenant.block_table) & set(first.block_table)


def test_batch_invariant_and_fast_requests_never_share_blocks():
    manager = BlockManager(num_blocks=20, block_size=4, enable_prefix_caching=True)
    prefix = list(range(100, 112))
    fast = make_seq("a", [*prefix, 1])
    manager.allocate(fast)
    computed(manager, fast)
    invariant = make_seq("b", [*prefix, 2])
    invariant.params = replace(invariant.params, batch_invariant=True)
    manager.allocate(invariant)
    assert invariant.num_cached_tokens == 0
    computed(manager, invariant)
    again = make_seq("c", [*prefix, 3])
    again.params = invariant.params
    manager.allocate(again)
    assert again.num_cached_tokens == 12
    assert again.block_table[:3] == invariant.block_table[:3]


def test_narrowed_salt_shares_only_the_blocks_before_the_evidence():
    manager = BlockManager(num_blocks=40, block_size=4, enable_prefix_caching=True)
    system = list(range(100, 108))  # two blocks of shared instructions
    evidence = list(range(200, 212))  # restricted text from token 8 on
    tokens = [*system, *evidence, 1, 2]
    secret = CacheSalt("tenant", ((8, "readers-of-memo"),))
    first = make_seq("a", tokens, salt=secret)
    manager.allocate(first)
    computed(manager, first)
    # The same tokens as a plain prompt of the tenant: only the shared instructions match.
    guess = make_seq("b", tokens, salt="tenant")
    manager.allocate(guess)
    assert guess.num_cached_tokens == 8
    # Another caller given the same evidence under the same salts shares all of it.
    same_access = make_seq("c", tokens, salt=secret)
    manager.allocate(same_access)
    assert same_access.num_cached_tokens == 20
    # Once the readers change (an ACL edit), the salt does, and the old blocks are out of reach.
    changed = make_seq("d", tokens, salt=CacheSalt("tenant", ((8, "new-readers"),)))
    manager.allocate(changed)
    assert changed.num_cached_tokens == 8


def test_a_narrowing_inside_a_block_salts_that_block():
    salt = CacheSalt("t", ((5, "x"), (9, "y")))
    assert [salt.for_block(i, 4) for i in range(4)] == ["", "x", "x\0y", "x\0y"]


def test_blocks_are_published_only_once_computed():
    manager = BlockManager(num_blocks=20, block_size=4, enable_prefix_caching=True)
    first = make_seq("a", list(range(16)))
    manager.allocate(first)
    first.num_computed_tokens = 4  # one chunk of prefill done
    manager.publish_computed_blocks(first)
    second = make_seq("b", list(range(16)))
    manager.allocate(second)
    assert second.num_cached_tokens == 4


def test_last_token_is_always_recomputed():
    manager = BlockManager(num_blocks=20, block_size=4, enable_prefix_caching=True)
    first = make_seq("a", list(range(8)))
    manager.allocate(first)
    computed(manager, first)
    again = make_seq("b", list(range(8)))
    manager.allocate(again)
    assert again.num_cached_tokens == 4
    assert again.num_uncomputed_tokens == 4


def test_freed_blocks_stay_cached_until_evicted_lru():
    manager = BlockManager(num_blocks=4, block_size=4, enable_prefix_caching=True)
    first = make_seq("a", [*range(8), 99])
    manager.allocate(first)
    computed(manager, first)
    manager.free(first)
    reuse = make_seq("b", [*range(8), 98])
    manager.allocate(reuse)
    assert reuse.num_cached_tokens == 8
    manager.free(reuse)
    # A request that needs every block evicts the cached ones.
    big = make_seq("c", list(range(500, 516)))
    manager.allocate(big)
    assert manager.num_free_blocks == 0
    manager.free(big)
    late = make_seq("d", [*range(8), 97])
    manager.allocate(late)
    assert late.num_cached_tokens == 0


def test_can_allocate_counts_output_reserve_and_shared_blocks():
    manager = BlockManager(num_blocks=4, block_size=4, enable_prefix_caching=True)
    seq = make_seq("a", list(range(8)))
    assert manager.can_allocate(seq, reserve_tokens=8)
    assert not manager.can_allocate(seq, reserve_tokens=9)
