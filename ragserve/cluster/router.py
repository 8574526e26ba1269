"""Prefix-aware routing to engine replicas, as a Ray Serve request router.

A prompt goes to the replica that most recently took the longest known prefix of it (its first
blocks hashed as the engine's prefix cache hashes them, tenant salt included), since that
replica most likely still holds those blocks' KV. When that replica is busier than the least
loaded one by more than `balance_tolerance` requests, or no prefix is known, the least loaded
replica takes it. Load is Ray Serve's count of requests in flight at each replica.

Every API replica has its own router; the table of prefixes is in the shared actor, so that a
prefix one router has sent somewhere is known to all.
"""

import random
from collections import OrderedDict

from ray.serve.request_router import (
    PendingRequest,
    ReplicaID,
    ReplicaResult,
    RequestRouter,
    RunningReplica,
)

from ragserve.cluster.shared_state import shared_state

# Requests chosen for but not yet routed (a cancelled one never is): at most this many kept.
MAX_IN_ROUTING = 10_000


class PrefixAwareRouter(RequestRouter):
    # Not FIFOMixin: a replica chosen for a request's prefix must serve that request, not
    # whichever request queued first.

    def initialize_state(self, balance_tolerance: int = 4) -> None:
        self.balance_tolerance = balance_tolerance
        self.shared = shared_state()
        # The prefix owner found for each request being routed (None: no known prefix).
        self.owner_found: OrderedDict[str, str | None] = OrderedDict()

    def load(self, replica: RunningReplica) -> int:
        return self.replica_queue_len_cache.get(replica.replica_id) or 0

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if pending_request is None:
            return [candidate_replicas]
        # Past the ranks returned, wait with backoff before asking again.
        pending_request.routing_context.should_backoff = True
        if "prefix_hashes" not in pending_request.kwargs:  # not a generation (describe())
            return [candidate_replicas]
        by_name = {r.replica_id.unique_id: r for r in candidate_replicas}
        owner_name = await self.shared.prefix_owner.remote(
            pending_request.kwargs["prefix_hashes"], list(by_name)
        )
        self.owner_found[pending_request.metadata.internal_request_id] = owner_name
        while len(self.owner_found) > MAX_IN_ROUTING:
            self.owner_found.popitem(last=False)
        owner = by_name.get(owner_name) if owner_name else None
        least = min(self.load(r) for r in candidate_replicas)
        if owner is not None and self.load(owner) - least <= self.balance_tolerance:
            return [[owner], [r for r in candidate_replicas if r is not owner]]
        # Ray Serve takes the one with the shortest queue among them, the first of equals:
        # shuffled, so that idle replicas share a burst.
        return [random.sample(candidate_replicas, len(candidate_replicas))]

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: ReplicaResult
    ) -> None:
        if "prefix_hashes" not in pending_request.kwargs:
            return
        owner = self.owner_found.pop(pending_request.metadata.internal_request_id, None)
        replica = replica_id.unique_id
        if owner is None:
            decision = "new"
        elif owner == replica:
            decision = "prefix"
        else:
            decision = "fallback"
        self.shared.record_route.remote(pending_request.kwargs["prefix_hashes"], replica, decision)
