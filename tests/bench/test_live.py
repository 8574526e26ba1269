"""`ragserve bench serve|rag` against a live ragserve on tiny loads."""

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

from ragserve.access import Role
from ragserve.bench.client import completion
from ragserve.bench.load import LoadSettings
from ragserve.bench.measures import Slo, request_latencies
from ragserve.bench.serve import TIMEOUT, measure
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.settings import Settings
from tests.server.conftest import start_server

MODEL = "smollm2-135m-instruct"
SUCCESS = "ragserve:request_success_total{finished_reason=%s}"


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedder):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), dtype="float32")
    engine = LLMEngine(EngineConfig(dtype="float32", kv_cache_memory_bytes=4096 * 46080))
    yield from start_server(settings, engine, embedder)


def run(server, jobs, settings: LoadSettings) -> dict:
    async def go() -> dict:
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as client:
            return await measure(client, jobs, settings, Slo(ttft_ms=60_000))

    return asyncio.run(go())


def jobs_for(keys: list[str], lengths: list[int]):
    prompt = "Tell me a short story about a lighthouse keeper."

    def job(n: int, max_tokens: int):
        key = keys[n % len(keys)]
        return lambda client, cancel_after: completion(
            client, MODEL, prompt, max_tokens, key, f"user-{n % len(keys)}", cancel_after
        )

    return [(job(n, length), length) for n, length in enumerate(lengths)]


def test_every_request_is_measured_and_matches_the_server(server):
    keys = [server.key("ann"), server.key("bob", tenant="other")]
    lengths = [3, 4, 5, 6, 7, 8]
    report = run(server, jobs_for(keys, lengths), LoadSettings(rate=float("inf")))
    summary = report["summary"]
    assert summary["completed"] == 6 and summary["cancelled"] == 0 and not summary["rejected"]
    assert summary["output_tokens_mean"] == pytest.approx(sum(lengths) / 6), "ignore_eos holds"
    assert report["server"]["counters"][SUCCESS % "length"] == 6
    assert set(report["per_user"]) == {"user-0", "user-1"}
    assert summary["ttft_ms"]["p99"] <= summary["e2e_ms"]["p99"]
    assert summary["goodput"] == pytest.approx(summary["request_throughput"])
    assert report["server"]["after_idle"]["running"] == 0


def test_cancelled_clients_free_their_kv_blocks(server):
    keys = [server.key("cy")]
    report = run(server, jobs_for(keys, [64] * 4), LoadSettings(rate=float("inf"), cancel_share=1))
    assert report["summary"]["cancelled"] == 4 and report["summary"]["completed"] == 0
    assert report["server"]["counters"][SUCCESS % "abort"] == 4
    assert report["server"]["after_idle"]["kv_cache_usage"] == 0.0
    server.wait_idle()


def test_single_request_latencies_follow_its_token_times(server):
    async def one():
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as client:
            return await completion(client, MODEL, "Hello", 5, server.key("di"), "di")

    result = asyncio.run(one())
    assert result.ok and result.output_tokens == 5 and result.prompt_tokens > 0
    latencies = request_latencies(result)
    assert latencies["ttft_ms"] == pytest.approx((result.token_times[0] - result.start) * 1000)
    assert latencies["e2e_ms"] >= latencies["ttft_ms"]


def bench(*args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "ragserve", "bench", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_serve_command_sweeps_and_writes_reports(server, tmp_path):
    key = server.key("eve")
    report = bench(
        "serve",
        "--url",
        server.url,
        "--api-key",
        key,
        "--num-requests",
        "4",
        "--input-len",
        "16-32",
        "--output-len",
        "4-6",
        "--sweep-rates",
        "2,inf",
        "--cancel-share",
        "0.25",
        "--slo",
        "ttft:60000",
        "--out",
        str(tmp_path),
        "--name",
        "s",
    )
    assert [run["rate"] for run in report["runs"]] == [2.0, "inf"]
    for run in report["runs"]:
        summary = run["summary"]
        assert summary["requests"] == 4
        assert summary["completed"] + summary["cancelled"] == 4
    assert report["meta"]["model"] == MODEL
    assert {p.name for p in tmp_path.iterdir()} >= {"s.json", "s.md", "s-sweep.png", "s-server.png"}


def test_compare_command_runs_every_server_on_the_same_prompts_in_alternating_order(
    server, tmp_path
):
    key = server.key("cat")
    names = ["a", "b"]
    report = bench(
        "compare",
        *("--server", f"a={server.url}", "--server", f"b={server.url}"),
        *("--api-key", f"a={key}", "--api-key", f"b={key}"),
        *("--concurrency", "1,2", "--rounds", "2", "--requests-per-stream", "1"),
        *("--min-requests", "2", "--warmup-requests", "1"),
        *("--input-len", "16-24", "--output-len", "4-4", "--out", str(tmp_path)),
    )
    assert [(c["round"], c["concurrency"], c["order"]) for c in report["cells"]] == [
        (1, 1, names),
        (1, 2, names),
        (2, 1, names[::-1]),
        (2, 2, names[::-1]),
    ]
    for cell in report["cells"]:
        a, b = cell["runs"]["a"], cell["runs"]["b"]
        assert a["completed"] == b["completed"] == 2
        assert a["prompt_tokens_mean"] == b["prompt_tokens_mean"], "same prompts for both"
    ratios = [
        c["runs"]["a"]["output_token_throughput"] / c["runs"]["b"]["output_token_throughput"]
        for c in report["cells"]
        if c["concurrency"] == 2
    ]
    assert report["medians"]["2"]["ratio"]["b"]["median"] == pytest.approx(sum(ratios) / 2)
    assert {p.name for p in tmp_path.iterdir()} == {"compare.json", "compare.md"}


def test_a_server_that_refuses_the_model_list_is_a_clear_error(server):
    from ragserve.bench.jobs import first_model

    assert first_model(server.url, server.key("gus")) == MODEL
    with pytest.raises(ValueError, match=f"cannot list the models of {server.url}.*401"):
        first_model(server.url, "not-a-key")


def test_rag_command_reports_the_time_split(server, tmp_path):
    writer = server.key("wes", ("staff",), role=Role.WRITER)
    httpx.post(
        server.url + "/v1/documents",
        headers={"Authorization": f"Bearer {writer}"},
        json={
            "text": "The Old Harbour lighthouse was built in 1874.",
            "title": "Lighthouse",
            "acl": {"groups": ["staff"]},
        },
        timeout=60,
    ).raise_for_status()
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "When was the Old Harbour lighthouse built?"}))
    report = bench(
        "rag",
        "--url",
        server.url,
        "--dataset",
        str(questions),
        "--api-key",
        server.key("sue", ("staff",)),
        "--num-requests",
        "3",
        "--out",
        str(tmp_path),
    )
    run = report["runs"][0]
    assert run["summary"]["completed"] == 3
    split = run["rag_split_ms"]
    assert (
        split["retrieval_ms"]["mean"] > 0
        and split["total_ms"]["mean"] >= split["retrieval_ms"]["mean"]
    )
    assert 0.0 <= run["refused_share"] <= 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cancel-share", "2"], "--cancel-share must be within [0, 1]"),
        (["--sweep-rates", "1,fast"], "--sweep-rates must be numbers"),
        (["--dataset-name", "poems"], "unknown --dataset-name"),
        (["--slo", "latency:5"], "ttft:MS"),
    ],
)
def test_bad_parameters_are_refused_before_any_request(args, message):
    result = subprocess.run(
        [sys.executable, "-m", "ragserve", "bench", "serve", "--url", "http://127.0.0.1:9", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert message in " ".join(result.stderr.split())
