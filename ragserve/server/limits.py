"""Per-user demand limits (concurrent requests, tokens per minute) and failed keys per client.

The engine's own limits (context length, queue size) protect the engine; these protect users
from each other, and keys from guessing. A request over a limit is refused at once with the
seconds until it may succeed, never queued.
"""

import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Protocol


@dataclass
class LimitExceeded(Exception):
    # Which limit: "per_user_concurrency" or "per_user_tokens".
    limit: str
    message: str
    retry_after_s: float


WINDOW_S = 60.0


class DemandLimiter(Protocol):
    """Per-user limits: UserLimiter in one process; behind Ray Serve, one UserLimiter shared by
    every replica (ragserve.cluster.shared_state). A user is an account (Principal.account: the
    user within its tenant), so a namesake in another tenant neither spends nor sees its budget.
    """

    async def acquire(self, account: str, prompt_tokens: int) -> None:
        """Admit a request or raise LimitExceeded; charges its prompt tokens."""

    def release(self, account: str, output_tokens: int) -> None:
        """The request is over: frees its slot and charges its output tokens."""


class UserLimiter:
    """Concurrent requests and tokens in a sliding minute, per account. A refusal states the
    caller's own usage and nothing else: no name, nobody else's count."""

    def __init__(self, max_concurrent: int, tokens_per_minute: int) -> None:
        self.max_concurrent = max_concurrent
        self.tokens_per_minute = tokens_per_minute
        self._active: dict[str, int] = defaultdict(int)
        self._spent: dict[str, deque[tuple[float, int]]] = defaultdict(deque)
        self._lock = threading.Lock()

    def _window(self, account: str, now: float) -> deque[tuple[float, int]]:
        spent = self._spent[account]
        while spent and spent[0][0] <= now - WINDOW_S:
            spent.popleft()
        return spent

    async def acquire(self, account: str, prompt_tokens: int) -> None:
        now = time.monotonic()
        with self._lock:
            if self._active[account] >= self.max_concurrent:
                raise LimitExceeded(
                    "per_user_concurrency",
                    f"this user already has {self._active[account]} requests in flight "
                    f"(limit {self.max_concurrent})",
                    1.0,
                )
            spent = self._window(account, now)
            used = sum(n for _, n in spent)
            if used + prompt_tokens > self.tokens_per_minute and spent:
                retry = spent[0][0] + WINDOW_S - now
                raise LimitExceeded(
                    "per_user_tokens",
                    f"this user used {used} tokens in the last minute "
                    f"(limit {self.tokens_per_minute})",
                    max(retry, 1.0),
                )
            self._active[account] += 1
            spent.append((now, prompt_tokens))

    def release(self, account: str, output_tokens: int) -> None:
        with self._lock:
            self._active[account] -= 1
            if output_tokens:
                self._spent[account].append((time.monotonic(), output_tokens))


class AuthThrottle:
    """Failed API keys per client address in a sliding minute. Past max_failures, every keyed
    request from that client is refused until the oldest failure leaves the window, valid key
    or not: letting a valid key through would tell a guesser which guess was right."""

    def __init__(self, max_failures: int) -> None:
        self.max_failures = max_failures
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, client: str) -> None:
        """Raise LimitExceeded if the client has failed too often in the last minute."""
        now = time.monotonic()
        with self._lock:
            failures = self._failures.get(client)
            if failures is None:
                return
            while failures and failures[0] <= now - WINDOW_S:
                failures.popleft()
            if not failures:
                del self._failures[client]
                return
            if len(failures) >= self.max_failures:
                raise LimitExceeded(
                    "auth_failures",
                    f"{len(failures)} invalid API keys from this client in the last minute "
                    f"(limit {self.max_failures})",
                    max(failures[0] + WINDOW_S - now, 1.0),
                )

    def record_failure(self, client: str) -> None:
        with self._lock:
            self._failures.setdefault(client, deque()).append(time.monotonic())
