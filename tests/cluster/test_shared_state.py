"""The shared actor's logic, run in-process: the prefix table the routers consult, the
per-user limits and the replicas' stats."""

import asyncio

import pytest

# Ray is optional (ragserve[ray]; `make test` installs it, `make test-fast` runs without it).
pytest.importorskip("ray")

from ragserve.cluster import shared_state
from ragserve.cluster.shared_state import SharedState
from ragserve.engine.block_manager import extend_block_hashes
from ragserve.engine.cache_salt import CacheSalt
from ragserve.engine.stats import EngineStats
from ragserve.server.limits import LimitExceeded


def hashes(tokens: list[int], tenant: str = "acme") -> list[bytes]:
    return extend_block_hashes([], tokens, CacheSalt(tenant), 4, False, len(tokens) // 4)


def test_the_longest_known_prefix_names_the_replica():
    state = SharedState(4, 1000)
    system_a = list(range(8))
    state.record_route(hashes([*system_a, 50, 51, 52, 53]), "r1", "new")
    state.record_route(hashes([*system_a, 60, 61, 62, 63]), "r2", "new")
    # Both share system_a's two blocks (r2 took them last); only r1 saw [50..53].
    assert state.prefix_owner(hashes([*system_a, 50, 51, 52, 53, 9, 9, 9, 9]), ["r1", "r2"]) == "r1"
    assert state.prefix_owner(hashes([*system_a, 70, 71, 72, 73]), ["r1", "r2"]) == "r2"
    # Each block names the one replica that took it last.
    assert state.prefix_owner(hashes([*system_a, 70, 71, 72, 73]), ["r1"]) is None
    assert state.prefix_owner(hashes([99] * 8), ["r1", "r2"]) is None
    # Another tenant's identical prompt hashes differently: it names no replica.
    assert state.prefix_owner(hashes(system_a, tenant="globex"), ["r1", "r2"]) is None
    assert state.routes == {("new", "r1"): 1, ("new", "r2"): 1}


def test_new_prefixes_take_turns_and_a_burst_of_one_stays_together():
    state = SharedState(4, 1000)
    firsts = [state.replica_for(hashes([n] * 8), ["r2", "r1"]) for n in range(4)]
    assert firsts == [("r1", False), ("r2", False), ("r1", False), ("r2", False)]
    # The same new prefix again, before its first request was routed: the replica it got.
    assert state.replica_for(hashes([1] * 8), ["r1", "r2"]) == ("r2", True)
    # Where the request went in the end is what the table keeps.
    state.record_route(hashes([1] * 8), "r1", "fallback")
    assert state.replica_for(hashes([1] * 8 + [5] * 4), ["r1", "r2"]) == ("r1", True)
    # A prompt shorter than a block has no prefix to keep; it still takes its turn.
    assert state.replica_for([], ["r1", "r2"]) == ("r1", False)
    assert state.replica_for([], ["r1", "r2"]) == ("r2", False)


def test_the_table_forgets_the_least_recent_prefixes(monkeypatch):
    monkeypatch.setattr(shared_state, "MAX_PREFIXES", 3)
    state = SharedState(4, 1000)
    old, new = list(range(8)), list(range(100, 108))
    state.record_route(hashes(old), "r1", "new")
    state.record_route(hashes(new), "r2", "new")
    state.record_route(hashes([*new, 1, 2, 3, 4]), "r2", "prefix")  # 5 blocks in all
    assert state.prefix_owner(hashes(old), ["r1", "r2"]) is None
    assert state.prefix_owner(hashes(new), ["r1", "r2"]) == "r2"


def test_limits_are_refused_with_the_reason_and_released():
    state = SharedState(1, 1000)
    assert asyncio.run(state.acquire("ann", 10)) is None
    refusal = asyncio.run(state.acquire("ann", 10))
    assert isinstance(refusal, LimitExceeded) and refusal.limit == "per_user_concurrency"
    state.release("ann", 5)
    assert asyncio.run(state.acquire("ann", 10)) is None


def test_a_replica_that_stops_reporting_leaves_the_snapshot(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(shared_state.time, "monotonic", lambda: now[0])
    state = SharedState(1, 1000)
    stats = EngineStats(1, 0, 0, 8, 4, 0, 0, 0)
    state.report("r1", stats)
    now[0] += 5
    state.report("r2", stats)
    assert set(state.snapshot()[0]) == {"r1", "r2"}
    now[0] += shared_state.STALE_AFTER_S - 1
    assert set(state.snapshot()[0]) == {"r2"}
