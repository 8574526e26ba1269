"""The capacity model on hand-made profiles, the profiler on the real engine, and the command."""

import json
import math

import pytest
from typer.testing import CliRunner

from ragserve.bench.capacity import EngineProfile, Lengths, kv_concurrency, operating_point, plan
from ragserve.bench.capacity_profile import measure_profile
from ragserve.bench.measures import Slo
from ragserve.cli import app


def profile(**changes) -> EngineProfile:
    fields = {
        "model": "m",
        "dtype": "float32",
        "kv_bytes_per_token": 46080,
        "kv_tokens": 1600,
        "block_size": 16,
        "max_num_seqs": 128,
        "chunk_tokens": 512,
        "prefill_tokens_per_s": 1000.0,
        "decode_step_s": {1: 0.05, 2: 0.06, 4: 0.08},
        "context_tokens": 512,
    }
    return EngineProfile(**(fields | changes))


def test_step_time_interpolates_between_sizes_and_extends_the_last_slope():
    p = profile()
    assert p.step_time(1) == 0.05 and p.step_time(2) == 0.06
    assert p.step_time(3) == pytest.approx(0.07)
    assert p.step_time(8) == pytest.approx(0.08 + 4 * 0.01)


def test_the_kv_pool_bounds_concurrency_by_the_blocks_a_request_holds_on_average():
    # prompt 100 + half of 100 outputs = 150 tokens = 10 blocks of 16 (160 tokens).
    assert kv_concurrency(profile(), Lengths(100, 100)) == 10
    assert kv_concurrency(profile(max_num_seqs=4), Lengths(100, 100)) == 4
    assert kv_concurrency(profile(kv_tokens=16), Lengths(100, 100)) == 1


def test_an_operating_point_follows_the_models_arithmetic():
    point = operating_point(profile(), Lengths(100, 10), 1)
    # Per request: 0.1 s of prefill + 10 steps of 0.05 s.
    assert point.requests_per_s == pytest.approx(1 / 0.6)
    assert point.prefill_share == pytest.approx(0.1 / 0.6)
    assert point.tpot_s == 0.05, "alone, no other prefill lands between its steps"
    share = 0.1 / 0.6
    assert point.ttft_s == pytest.approx(0.1 + share * 0.1 / (2 * (1 - share)) + 0.05)
    assert point.e2e_s == pytest.approx(point.ttft_s + 9 * point.tpot_s)
    wider = operating_point(profile(), Lengths(100, 10), 4)
    share = wider.prefill_share
    assert wider.requests_per_s == pytest.approx(1 / (0.1 + 10 * 0.08 / 4))
    assert wider.tpot_s == pytest.approx(0.08 / (1 - share * 3 / 4))
    assert wider.requests_per_s > point.requests_per_s and wider.tpot_s > point.tpot_s


def test_the_plan_takes_the_fastest_point_within_the_slos_and_counts_replicas():
    lengths = Lengths(100, 100)
    free = plan(profile(), lengths, Slo(), target_rate=10.0)
    assert free.kv_concurrency == 10 and len(free.points) == 10
    assert free.best == max(free.points, key=lambda p: p.requests_per_s)
    assert free.replicas == math.ceil(10.0 / free.best.requests_per_s)
    strict = plan(profile(), lengths, Slo(tpot_ms=80))
    assert strict.best is not None and strict.best.tpot_s <= 0.08
    assert all(p.tpot_s > 0.08 for p in strict.points if p.concurrency > strict.best.concurrency)
    assert plan(profile(), lengths, Slo(tpot_ms=1)).best is None
    with pytest.raises(ValueError):
        plan(profile(), lengths, Slo(), target_rate=0)


def test_profiles_round_trip_and_refuse_nonsense():
    p = profile()
    assert EngineProfile.from_json(json.loads(json.dumps(p.as_json()))) == p
    with pytest.raises(ValueError):
        profile(decode_step_s={})
    with pytest.raises(ValueError):
        profile(prefill_tokens_per_s=0.0)


def test_the_profiler_measures_the_real_engine(llm_fp32, tmp_path):
    engine = llm_fp32.engine
    measured = measure_profile(engine, batches=(1, 2, 512), context=32, steps=3)
    assert set(measured.decode_step_s) == {1, 2}, "a batch the pool cannot hold is left out"
    assert measured.prefill_tokens_per_s > 0 and all(measured.decode_step_s.values())
    assert measured.kv_tokens == engine.kv_cache.num_tokens
    assert measured.kv_bytes_per_token == 2 * 30 * 3 * 64 * 4  # layers, KV heads, dims, float32
    assert not engine.has_unfinished_requests()
    saved = tmp_path / "profile.json"
    saved.write_text(json.dumps(measured.as_json()))
    command = [
        "capacity",
        *("--profile", str(saved), "--dataset-name", "random"),
        *("--input-len", "100-100", "--output-len", "20-20"),
        *("--target-rate", "5", "--json"),
    ]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["lengths"]["output"] == 20 and 95 <= report["lengths"]["prompt"] <= 100
    best = report["plan"]["best"]
    assert report["plan"]["replicas"] == math.ceil(5 / best["requests_per_s"])
    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    refused = CliRunner().invoke(app, ["capacity", "--profile", str(broken)])
    assert refused.exit_code == 2 and "cannot read the profile" in refused.output
