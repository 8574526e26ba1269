from ragserve.engine.fairness import FairQueue
from tests.engine.helpers import make_scheduler, make_seq, run_step


def test_heavy_user_does_not_starve_light_user():
    scheduler = make_scheduler(num_blocks=400, max_num_seqs=2, max_num_batched_tokens=64)
    for i in range(50):
        scheduler.add(
            make_seq(f"heavy-{i}", [1, 2, 3, 4, 5, 6], max_tokens=4, user="heavy", arrival=i)
        )
    for i in range(2):
        scheduler.add(
            make_seq(f"light-{i}", [9, 8, 7, 6, 5, 4], max_tokens=4, user="light", arrival=100 + i)
        )
    admitted: list[str] = []
    while scheduler.has_unfinished() and len(admitted) < 52:
        for request_id in run_step(scheduler):
            if request_id not in admitted:
                admitted.append(request_id)
    light_positions = [admitted.index(f"light-{i}") for i in range(2)]
    # FIFO would admit them 51st and 52nd; fair queuing interleaves them early.
    assert max(light_positions) < 6, admitted[:10]


def test_returning_user_is_lifted_to_the_waiting_floor():
    queue = FairQueue()
    queue.push(make_seq("a", [1], user="a"))
    queue.charge("a", 1000, 0)
    queue.push(make_seq("b", [1], user="b", arrival=1))
    # b was idle: it starts at a's counter rather than 0, so it cannot bank credit.
    assert queue.counters["b"] == 1000


def test_priority_goes_first_within_and_across_users():
    queue = FairQueue()
    queue.push(make_seq("low", [1], user="a", priority=5, arrival=0))
    queue.push(make_seq("high", [1], user="a", priority=0, arrival=1))
    queue.push(make_seq("other", [1], user="b", priority=1, arrival=2))
    order = []
    while (seq := queue.peek()) is not None:
        order.append(seq.request_id)
        queue.remove(seq)
    assert order == ["high", "other", "low"]


def test_queue_totals_follow_pushes_and_removals():
    queue = FairQueue()
    seqs = [make_seq(str(i), [1] * (i + 1), user=f"u{i % 2}") for i in range(4)]
    for seq in seqs:
        queue.push(seq)
    assert len(queue) == 4 and queue.num_tokens == 1 + 2 + 3 + 4
    queue.remove(seqs[1])
    assert len(queue) == 3 and queue.num_tokens == 8
    assert sorted(s.request_id for s in queue) == ["0", "2", "3"]
