from tests.engine.helpers import make_scheduler, make_seq, run_step


def test_chunked_prefill_never_stalls_running_decodes():
    scheduler = make_scheduler(num_blocks=200, max_num_batched_tokens=16)
    scheduler.add(make_seq("short", [1, 2, 3], max_tokens=20))
    run_step(scheduler)  # short is now decoding
    scheduler.add(make_seq("long", list(range(100, 164)), max_tokens=4))
    chunks = []
    while scheduler.running and "long" not in [
        s.request_id for s in scheduler.running if s.num_output_tokens
    ]:
        step = run_step(scheduler)
        assert step.get("short") == 1, "the decode must run every step"
        assert sum(step.values()) <= 16
        chunks.append(step.get("long", 0))
    # 64 prompt tokens over steps of 15 (16 minus the decode).
    assert chunks[:4] == [15, 15, 15, 15]
    assert sum(chunks) == 64


def test_admission_waits_for_free_blocks():
    scheduler = make_scheduler(num_blocks=6, block_size=4, output_reserve_tokens=4)
    scheduler.add(make_seq("a", list(range(12)), max_tokens=4))
    scheduler.add(make_seq("b", list(range(50, 62)), max_tokens=4))
    step = run_step(scheduler)
    # a needs 12 + 4 reserve = 4 blocks; b would need 4 more of the remaining 2.
    assert list(step) == ["a"]
    while any(s.request_id == "a" for s in scheduler.running):
        run_step(scheduler)
    assert "b" in run_step(scheduler)


def test_preemption_frees_blocks_and_requeues():
    scheduler = make_scheduler(num_blocks=4, block_size=4, output_reserve_tokens=0)
    scheduler.add(make_seq("first", list(range(7)), max_tokens=8, arrival=0))
    scheduler.add(make_seq("second", list(range(20, 27)), max_tokens=8, arrival=1))
    run_step(scheduler)
    assert [s.request_id for s in scheduler.running] == ["first", "second"]
    run_step(scheduler)  # both grow to 8 tokens: still 2 blocks each
    run_step(scheduler)  # growing to 9 tokens needs a third block each: second is preempted
    assert scheduler.num_preemptions >= 1
    assert [s.request_id for s in scheduler.running] == ["first"]
    preempted = next(iter(scheduler.waiting))
    assert preempted.request_id == "second" and not preempted.block_table
    for _ in range(40):
        if not scheduler.has_unfinished():
            break
        run_step(scheduler)
    assert not scheduler.has_unfinished()
    assert scheduler.block_manager.num_free_blocks == 4
