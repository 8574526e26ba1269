import asyncio
import math

import httpx

from ragserve.bench.load import ServerProbe, counter_deltas

METRICS = """# TYPE ragserve:num_requests_running gauge
ragserve:num_requests_running{replica="a"} 1.0
ragserve:num_requests_running{replica="b"} 2.0
# TYPE ragserve:kv_cache_usage_perc gauge
ragserve:kv_cache_usage_perc{replica="a"} 0.25
ragserve:kv_cache_usage_perc{replica="b model"} 0.75 1733000000000
# A longer name that starts like a gauge's is not that gauge.
ragserve:num_requests_waiting_seconds_sum 9.0
# TYPE ragserve:request_success counter
ragserve:request_success_total{finished_reason="abort"} 3.0
"""


def probe_of(handler) -> ServerProbe:
    transport = httpx.MockTransport(handler)
    return ServerProbe(httpx.AsyncClient(transport=transport, base_url="http://server"))


def test_gauges_and_counters_from_prometheus_text():
    probe = probe_of(lambda request: httpx.Response(200, text=METRICS))
    gauges = asyncio.run(probe.gauges())
    # Replicas' requests add up; their KV usage shares are averaged.
    assert gauges["kv_cache_usage"] == 0.5 and gauges["running"] == 3
    assert math.isnan(gauges["waiting"]), "a gauge the server lacks reads NaN"
    values = asyncio.run(probe.read())
    before = {"ragserve:request_success_total{finished_reason=abort}": 1.0}
    assert counter_deltas(before, values) == {
        "ragserve:request_success_total{finished_reason=abort}": 2.0
    }


def test_a_server_without_metrics_counts_as_idle_at_once():
    probe = probe_of(lambda request: httpx.Response(404))
    assert asyncio.run(probe.read()) == {}
    gauges = asyncio.run(probe.wait_idle(timeout_s=30))
    assert all(math.isnan(v) for v in gauges.values())
