"""What a request to the model passes before it runs, for completions and answers alike: the
response cache in front (a hit is served without touching the caller's limits), then the
caller's per-user limits, released with the tokens it produced."""

from typing import Any

from ragserve.access import Principal
from ragserve.server.errors import from_limit
from ragserve.server.limits import LimitExceeded
from ragserve.server.response_cache import cache_key
from ragserve.server.state import ServerState


def cache_lookup(state: ServerState, parts: dict[str, Any]) -> tuple[str | None, Any]:
    """The request's cache key (None with the cache off) and its stored response, if any."""
    if state.cache is None:
        return None, None
    key = cache_key(parts)
    state.metrics.response_cache_queries.inc()
    found = state.cache.get(key)
    if found is not None:
        state.metrics.response_cache_hits.inc()
    return key, found


def cache_store(state: ServerState, key: str | None, response: Any) -> None:
    if key is not None and state.cache is not None:
        state.cache.put(key, response)


async def acquire(state: ServerState, who: Principal, prompt_tokens: int) -> None:
    """Take the caller's share of the limits, or refuse with 429 and Retry-After."""
    try:
        await state.limiter.acquire(who.account, prompt_tokens)
    except LimitExceeded as error:
        raise from_limit(error) from error


def release(state: ServerState, who: Principal, completion_tokens: int) -> None:
    state.limiter.release(who.account, completion_tokens)
