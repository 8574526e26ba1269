"""What every replica must see alike, in one named Ray actor: the per-user limits (so a user's
concurrency and tokens per minute hold across API replicas), the prefix table that every API
replica's router consults, the engine replicas' latest stats and the routing decision counts
(so any API replica's /metrics reports them all)."""

import time
from collections import Counter, OrderedDict

import ray
from ray.actor import ActorHandle

from ragserve.engine.stats import EngineStats
from ragserve.server.limits import LimitExceeded, UserLimiter

ACTOR_NAME = "ragserve-shared-state"
NAMESPACE = "ragserve"
# An engine replica reports every REPORT_EVERY_S; one silent for STALE_AFTER_S is gone.
REPORT_EVERY_S = 1.0
STALE_AFTER_S = 10.0
# Prefix block hashes remembered (LRU): ~100 bytes each.
MAX_PREFIXES = 500_000


class SharedState:
    """Run as a Ray actor (see start_shared_state); every method is one actor call."""

    def __init__(self, max_concurrent: int, tokens_per_minute: int) -> None:
        self.limiter = UserLimiter(max_concurrent, tokens_per_minute)
        self.stats: dict[str, tuple[float, EngineStats]] = {}
        self.routes: Counter[tuple[str, str]] = Counter()
        # Block hash -> the engine replica that last took a prompt with that prefix.
        self.owners: OrderedDict[bytes, str] = OrderedDict()
        # New prefixes handed out so far: the next one goes to the next replica in turn.
        self.new_prefixes = 0

    async def acquire(self, account: str, prompt_tokens: int) -> LimitExceeded | None:
        """The refusal, returned rather than raised: it reaches the caller as itself. account:
        the user within its tenant (Principal.account), as the one-process limiter counts."""
        try:
            await self.limiter.acquire(account, prompt_tokens)
        except LimitExceeded as refusal:
            return refusal
        return None

    def release(self, account: str, output_tokens: int) -> None:
        self.limiter.release(account, output_tokens)

    def report(self, replica: str, stats: EngineStats) -> None:
        self.stats[replica] = (time.monotonic(), stats)

    def prefix_owner(self, hashes: list[bytes], replicas: list[str]) -> str | None:
        """Which of replicas took the longest of these prefixes last, if any did."""
        for block_hash in reversed(hashes):
            owner = self.owners.get(block_hash)
            if owner in replicas:
                return owner
        return None

    def replica_for(self, hashes: list[bytes], replicas: list[str]) -> tuple[str, bool]:
        """The replica that took the longest of these prefixes last and True; if none did, the
        next of replicas in turn and False. A new prefix is that replica's at once, before its
        request is routed: a burst of one new prefix stays together, and a burst of different
        ones is shared out even while the routers' load counts still read zero everywhere."""
        owner = self.prefix_owner(hashes, replicas)
        if owner is not None:
            return owner, True
        chosen = sorted(replicas)[self.new_prefixes % len(replicas)]
        self.new_prefixes += 1
        self.remember(hashes, chosen)
        return chosen, False

    def record_route(self, hashes: list[bytes], replica: str, decision: str) -> None:
        self.routes[decision, replica] += 1
        self.remember(hashes, replica)

    def remember(self, hashes: list[bytes], replica: str) -> None:
        for block_hash in hashes:
            self.owners[block_hash] = replica
            self.owners.move_to_end(block_hash)
        while len(self.owners) > MAX_PREFIXES:
            self.owners.popitem(last=False)

    def snapshot(self) -> tuple[dict[str, EngineStats], dict[tuple[str, str], int]]:
        """The live replicas' stats and the decision counts."""
        now = time.monotonic()
        for replica, (at, _) in list(self.stats.items()):
            if now - at > STALE_AFTER_S:
                del self.stats[replica]
        return {r: s for r, (_, s) in self.stats.items()}, dict(self.routes)


def start_shared_state(max_concurrent: int, tokens_per_minute: int) -> ActorHandle:
    """The actor, detached so it outlives the process that deploys (stop_shared_state ends
    it); needs no CPU of its own."""
    actor_class = ray.remote(num_cpus=0)(SharedState)
    return actor_class.options(  # type: ignore[attr-defined]
        name=ACTOR_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True
    ).remote(max_concurrent, tokens_per_minute)


def shared_state() -> ActorHandle:
    return ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)


def stop_shared_state() -> None:
    ray.kill(shared_state())


class SharedLimiter:
    """The DemandLimiter of API replicas: the one UserLimiter in the shared actor."""

    def __init__(self, actor: ActorHandle) -> None:
        self.actor = actor

    async def acquire(self, account: str, prompt_tokens: int) -> None:
        refusal = await self.actor.acquire.remote(account, prompt_tokens)
        if refusal is not None:
            raise refusal

    def release(self, account: str, output_tokens: int) -> None:
        self.actor.release.remote(account, output_tokens)  # nobody waits on the release
