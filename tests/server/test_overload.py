import httpx
import pytest

from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.settings import Settings
from tests.server.conftest import start_server


@pytest.fixture(scope="module")
def small_server(tmp_path_factory, embedder):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), dtype="float32")
    engine = LLMEngine(
        EngineConfig(
            dtype="float32",
            kv_cache_memory_bytes=2048 * 46080,
            max_num_seqs=1,
            max_queued_requests=1,
            # No drafts: the counting prompt would let the first request finish in a few
            # steps, before the third arrives to find the queue full.
            speculative_tokens=0,
        )
    )
    yield from start_server(settings, engine, embedder)


def test_full_queue_is_503_with_retry_after(small_server):
    headers = {"Authorization": f"Bearer {small_server.key('u1')}"}
    body = {
        "model": "smollm2-135m-instruct",
        "prompt": "Count: 1, 2,",
        "max_tokens": 600,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.Client(timeout=60) as http:
        streams = [
            http.stream("POST", small_server.url + "/v1/completions", json=body, headers=headers)
            for _ in range(2)
        ]
        try:
            # Keep the line iterator: dropping it closes the connection, and the server then
            # aborts the first request, which would leave room for the third.
            first_lines = streams[0].__enter__().iter_lines()
            next(first_lines)  # running
            assert streams[1].__enter__().status_code == 200  # queued
            refused = http.post(small_server.url + "/v1/completions", json=body, headers=headers)
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "overloaded"
            assert int(refused.headers["Retry-After"]) >= 1
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)
    small_server.wait_idle()
    metrics = httpx.get(small_server.url + "/metrics").text
    assert 'ragserve:requests_rejected_total{reason="queue_full"} 1.0' in metrics
