"""The serving report's figures on a hand-made trace whose answers are worked out by hand."""

import pytest

from ragserve.bench.client import RequestResult
from ragserve.bench.measures import Slo, server_time_split, summarize


def result(start, token_times, end, tokens, status=200, **fields) -> RequestResult:
    return RequestResult(
        "u", start, end, status, list(token_times), prompt_tokens=10, output_tokens=tokens, **fields
    )


TRACE = [
    # TTFT 0.1 s, 4 tokens, E2E 0.4 s: TPOT (400 - 100) / 3 = 100 ms; ITL 100, 100, 100 ms.
    result(0.0, [0.1, 0.2, 0.3, 0.4], 0.4, 4),
    # TTFT 0.3 s, 3 tokens, E2E 0.9 s: TPOT (900 - 300) / 2 = 300 ms; ITL 200, 400 ms.
    result(1.0, [1.3, 1.5, 1.9], 1.9, 3),
    # Cancelled after one token: never in the latency figures.
    result(0.5, [0.6], 0.7, 0, cancelled=True),
    # Rejected twice with 429, once with 503.
    result(0.2, [], 0.21, 0, status=429, error="too many requests"),
    result(0.3, [], 0.31, 0, status=429, error="too many requests"),
    result(0.4, [], 0.41, 0, status=503, error="overloaded"),
    # The stream broke after one token.
    result(0.5, [0.6], 0.65, 0, error="RemoteProtocolError: peer closed connection"),
]


def test_latencies_throughput_and_rejections():
    report = summarize(TRACE, duration_s=2.0, slo=Slo(ttft_ms=200))
    assert (report["requests"], report["completed"], report["cancelled"]) == (7, 2, 1)
    assert report["rejected"] == {"429": 2, "503": 1} and report["failed"] == 1
    assert report["errors"] == {
        "too many requests": 2,
        "overloaded": 1,
        "RemoteProtocolError: peer closed connection": 1,
    }
    assert report["ttft_ms"]["mean"] == pytest.approx(200)
    assert report["ttft_ms"]["p50"] == pytest.approx(200)
    assert report["ttft_ms"]["p99"] == pytest.approx(100 + 0.99 * 200)
    assert report["tpot_ms"]["mean"] == pytest.approx(200)
    assert report["e2e_ms"]["p50"] == pytest.approx(650)
    assert report["itl_ms"]["mean"] == pytest.approx((100 * 3 + 200 + 400) / 5)
    assert report["itl_ms"]["p50"] == pytest.approx(100)
    assert report["request_throughput"] == pytest.approx(1.0)
    assert report["output_token_throughput"] == pytest.approx(3.5)
    assert report["total_token_throughput"] == pytest.approx((7 + 20) / 2)
    # Only the first request meets TTFT <= 200 ms.
    assert report["goodput"] == pytest.approx(0.5) and report["goodput_share"] == 0.5


def test_slo_parsing_and_several_objectives():
    slo = Slo.parse(["ttft:500", "tpot:150"])
    assert slo == Slo(ttft_ms=500, tpot_ms=150)
    assert summarize(TRACE, 2.0, slo)["goodput_share"] == 0.5, "the second misses TPOT"
    assert summarize(TRACE, 2.0, Slo())["goodput_share"] == 1.0
    with pytest.raises(ValueError, match="ttft:MS"):
        Slo.parse(["latency:5"])


def test_rag_time_split_puts_the_rest_in_generation():
    timed = result(0.0, [0.1], 0.5, 1)
    timed.server_timings = {
        "retrieval_ms": 40.0,
        "rerank_ms": 0.0,
        "check_ms": 10.0,
        "total_ms": 450.0,
    }
    split = server_time_split([timed])
    assert split["generation_ms"]["mean"] == pytest.approx(400.0)
    assert split["retrieval_ms"]["p99"] == pytest.approx(40.0)
