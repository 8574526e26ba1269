import asyncio

import pytest

from ragserve.server import limits
from ragserve.server.limits import AuthThrottle, LimitExceeded, UserLimiter


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(limits.time, "monotonic", lambda: now[0])
    return now


def test_concurrency_is_per_user_and_released(clock):
    limiter = UserLimiter(max_concurrent=2, tokens_per_minute=10_000)
    asyncio.run(limiter.acquire("alice", 10))
    asyncio.run(limiter.acquire("alice", 10))
    with pytest.raises(LimitExceeded) as refused:
        asyncio.run(limiter.acquire("alice", 10))
    assert refused.value.limit == "per_user_concurrency" and refused.value.retry_after_s >= 1
    asyncio.run(limiter.acquire("bob", 10))  # another user is not affected
    limiter.release("alice", 0)
    asyncio.run(limiter.acquire("alice", 10))


def test_tokens_per_minute_window_counts_prompt_and_output(clock):
    limiter = UserLimiter(max_concurrent=10, tokens_per_minute=100)
    asyncio.run(limiter.acquire("alice", 60))
    limiter.release("alice", 30)  # 90 spent
    with pytest.raises(LimitExceeded) as refused:
        asyncio.run(limiter.acquire("alice", 20))
    assert refused.value.limit == "per_user_tokens"
    assert refused.value.retry_after_s == pytest.approx(60.0)
    clock[0] += 61  # the window has moved past both charges
    asyncio.run(limiter.acquire("alice", 20))


def test_a_first_request_larger_than_the_budget_is_admitted(clock):
    # Refusing it would refuse it forever: an empty window admits any one request.
    asyncio.run(UserLimiter(max_concurrent=1, tokens_per_minute=10).acquire("alice", 500))


def test_failed_keys_throttle_their_client_for_the_rest_of_the_minute(clock):
    throttle = AuthThrottle(max_failures=3)
    for _ in range(3):
        throttle.check("10.0.0.1")
        throttle.record_failure("10.0.0.1")
        clock[0] += 10
    with pytest.raises(LimitExceeded) as refused:
        throttle.check("10.0.0.1")
    assert refused.value.limit == "auth_failures"
    assert refused.value.retry_after_s == pytest.approx(30)  # the first failure ages out
    throttle.check("10.0.0.2")  # another client is not affected
    clock[0] += 30
    throttle.check("10.0.0.1")
