"""The waiting queue, ordered fairly across users with virtual token counters.

After "Fairness in Serving Large Language Models" (Sheng et al., OSDI'24): each user has a counter
of the service it has received (prompt tokens weighted 1, output tokens weighted 2); the next
request comes from the user with the smallest counter. A user who returns after being idle is
lifted to the smallest counter among waiting users, so idleness does not bank credit.
Within a user, requests go by priority (lower first) and then arrival. Preempted requests go
before everything of the same priority: they already hold a place in line.
"""

import bisect
from collections.abc import Iterator

from ragserve.engine.sequence import Sequence

PROMPT_TOKEN_WEIGHT = 1.0
OUTPUT_TOKEN_WEIGHT = 2.0


def _queue_key(seq: Sequence) -> tuple[int, int, float]:
    return (seq.priority, 0 if seq.num_preemptions else 1, seq.arrival_time)


class FairQueue:
    def __init__(self) -> None:
        self.counters: dict[str, float] = {}
        self._queues: dict[str, list[Sequence]] = {}
        # Kept as totals so other threads (admission limits, metrics) read them without
        # iterating containers that the engine thread is changing.
        self._size = 0
        self.num_tokens = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Sequence]:
        for queue in self._queues.values():
            yield from queue

    def push(self, seq: Sequence) -> None:
        queue = self._queues.get(seq.user)
        if queue is None:
            waiting = [self.counters.get(u, 0.0) for u in self._queues]
            floor = min(waiting) if waiting else 0.0
            self.counters[seq.user] = max(self.counters.get(seq.user, 0.0), floor)
            queue = self._queues[seq.user] = []
        keys = [_queue_key(s) for s in queue]
        queue.insert(bisect.bisect_right(keys, _queue_key(seq)), seq)
        self._size += 1
        self.num_tokens += seq.num_tokens

    def peek(self) -> Sequence | None:
        heads = [q[0] for q in self._queues.values()]
        if not heads:
            return None
        return min(heads, key=lambda s: (*_queue_key(s)[:2], self.counters[s.user], s.arrival_time))

    def remove(self, seq: Sequence) -> None:
        queue = self._queues[seq.user]
        queue.remove(seq)
        self._size -= 1
        self.num_tokens -= seq.num_tokens
        if not queue:
            del self._queues[seq.user]

    def charge(self, user: str, prompt_tokens: int, output_tokens: int) -> None:
        self.counters[user] = (
            self.counters.get(user, 0.0)
            + PROMPT_TOKEN_WEIGHT * prompt_tokens
            + OUTPUT_TOKEN_WEIGHT * output_tokens
        )
