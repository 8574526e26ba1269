"""Prefix-aware routing to engine replicas, as a Ray Serve request router.

A prompt goes to the replica that most recently took the longest known prefix of it (its first
blocks hashed as the engine's prefix cache hashes them, tenant salt included), since that
replica most likely still holds those blocks' KV. When that replica is busier than the least
loaded one by more than `balance_tolerance` requests, the least loaded replica takes it. A new
prefix goes to the next replica in turn if none is less loaded, else to the least loaded. Load
is Ray Serve's count of requests in flight at each replica, which lags a burst: the turns are
what share a burst of new prefixes out.

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
        # The replica chosen for each request being routed, and whether its prefix was known.
        self.chosen: OrderedDict[str, tuple[str, bool]] = OrderedDict()

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
        name, known = await self.shared.replica_for.remote(
            pending_request.kwargs["prefix_hashes"], list(by_name)
        )
        self.chosen[pending_request.metadata.internal_request_id] = name, known
        while len(self.chosen) > MAX_IN_ROUTING:
            self.chosen.popitem(last=False)
        replica = by_name[name]
        least = min(self.load(r) for r in candidate_replicas)
        if self.load(replica) - least <= (self.balance_tolerance if known else 0):
            return [[replica], [r for r in candidate_replicas if r is not replica]]
        # Ray Serve takes the one with the shortest queue among them, the first of equals.
        return [random.sample(candidate_replicas, len(candidate_replicas))]

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: ReplicaResult
    ) -> None:
        if "prefix_hashes" not in pending_request.kwargs:
            return
        chosen, known = self.chosen.pop(pending_request.metadata.internal_request_id, (None, False))
        replica = replica_id.unique_id
        if not known:
            decision = "new"
        elif chosen == replica:
            decision = "prefix"
        else:
            decision = "fallback"
        self.shared.record_route.remote(pending_request.kwargs["prefix_hashes"], replica, decision)
