"""The same question gets the same generated answer, cold or from the prefix cache, alone or
beside other work (answers run in the engine's batch-invariant mode), in bfloat16."""

import json
import threading
from collections.abc import Iterator

import httpx
import pytest

from ragserve.access import Role
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.settings import Settings
from tests.server.conftest import LiveServer, start_server

MODEL = "smollm2-135m-instruct"
QUESTION = "How much does the Globex acquisition cost?"
MEMO = (
    "The board approved the acquisition of Globex Corporation for 120 million euros. "
    "The deal is code-named Bluebird and closes on 30 September. Globex makes household "
    "appliances in three factories and employs 2,400 people."
)


@pytest.fixture(scope="module")
def live(tmp_path_factory, embedder) -> Iterator[LiveServer]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        dtype="bfloat16",
        max_num_batched_tokens=128,
        answer_max_tokens=32,
        answer_style="generate",
        response_cache=False,
    )
    engine = LLMEngine(
        EngineConfig(
            dtype="bfloat16", kv_cache_memory_bytes=4096 * 18432, max_num_batched_tokens=128
        )
    )
    yield from start_server(settings, engine, embedder)


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _answer(live: LiveServer, key: str) -> tuple[str, dict]:
    """The streamed text (the checked answer: a draft is never streamed before its check) and
    the final answer."""
    body = {"question": QUESTION, "stream": True}
    with httpx.stream(
        "POST", live.url + "/v1/answers", json=body, headers=_headers(key), timeout=300
    ) as response:
        raw = response.read().decode()
        assert response.status_code == 200, raw
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    text = "".join(e["text"] for e in events if e["type"] == "token")
    return text, events[-1]


def _complete(live: LiveServer, key: str, prompt: str, **extra) -> dict:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 24, "temperature": 0} | extra
    response = httpx.post(
        live.url + "/v1/completions", json=body, headers=_headers(key), timeout=300
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_an_answer_is_the_same_cold_warm_and_beside_other_requests(live, monkeypatch):
    modes = []  # the batch_invariant flag of every engine request
    add_request = live.engine.add_request

    def recording(prompt, params, *args, **kwargs):
        modes.append(params.batch_invariant)
        return add_request(prompt, params, *args, **kwargs)

    monkeypatch.setattr(live.engine, "add_request", recording)
    admin = live.key("root", role=Role.ADMIN)
    body = {"text": MEMO, "title": "Board memo", "acl": {"groups": ["board"]}}
    response = httpx.post(live.url + "/v1/documents", json=body, headers=_headers(admin))
    assert response.status_code == 201, response.text
    board = live.key("bo", ("board",))
    cold_text, cold = _answer(live, board)
    # Every model call of the answer (generation, and reranking where it runs) was
    # batch-invariant.
    assert modes and all(modes)
    assert cold["usage"]["completion_tokens"] > 0 and cold_text == cold["answer"], cold
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    answers = [_answer(live, board) for _ in range(4)]
    assert all(a["usage"]["prompt_tokens_details"]["cached_tokens"] > 0 for _, a in answers)
    # Once more while another user's long completions share the engine's steps.
    other = live.key("olga", ("staff",))
    busy = [
        threading.Thread(target=_complete, args=(live, other, "Tell a story. " * (40 + 30 * i)))
        for i in range(3)
    ]
    for thread in busy:
        thread.start()
    answers.append(_answer(live, board))
    for thread in busy:
        thread.join()
    for text, answer in answers:
        assert text == cold_text
        assert answer["answer"] == cold["answer"]
        assert answer["usage"]["completion_tokens"] == cold["usage"]["completion_tokens"]


def test_a_completion_can_ask_for_the_batch_invariant_mode(live):
    key = live.key("cara", ("staff",))
    prompt = "The harbour committee met on Tuesday to discuss the new pier. " * 30
    cold = _complete(live, key, prompt, batch_invariant=True)
    warm = _complete(live, key, prompt, batch_invariant=True)
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert warm["choices"][0]["text"] == cold["choices"][0]["text"]
