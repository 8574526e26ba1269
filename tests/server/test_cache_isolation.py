"""The prefix-cache oracle (cached_tokens or TTFT confirming a guess at restricted text) and
the response cache, across permission boundaries."""

from collections.abc import Iterator

import httpx
import pytest

from ragserve.access import Principal, Role, access_for
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.settings import Settings
from tests.server.conftest import LiveServer, start_server

QUESTION = "How much does the Globex acquisition cost?"
MEMO = (
    "The board approved the acquisition of Globex Corporation for 120 million euros. "
    "The deal is code-named Bluebird and closes on 30 September."
)
PUBLIC = "Globex Corporation is a fictional company that makes household appliances."


@pytest.fixture(scope="module")
def live(tmp_path_factory, embedder) -> Iterator[LiveServer]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        dtype="float32",
        max_num_batched_tokens=256,
        answer_max_tokens=8,
        answer_style="generate",  # the prompt must run for its blocks to enter the cache
        response_cache=False,
    )
    engine = LLMEngine(
        EngineConfig(
            dtype="float32", kv_cache_memory_bytes=4096 * 46080, max_num_batched_tokens=256
        )
    )
    yield from start_server(settings, engine, embedder)


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _answer(live: LiveServer, key: str) -> dict:
    response = httpx.post(
        live.url + "/v1/answers", json={"question": QUESTION}, headers=_headers(key), timeout=300
    )
    assert response.status_code == 200, response.text
    return response.json()


def _cached_tokens(live: LiveServer, key: str, prompt: str) -> int:
    response = httpx.post(
        live.url + "/v1/completions",
        json={"model": "smollm2-135m-instruct", "prompt": prompt, "max_tokens": 1},
        headers=_headers(key),
        timeout=300,
    )
    assert response.status_code == 200, response.text
    return response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def _common_prefix(live: LiveServer, a: str, b: str) -> int:
    encode = live.engine.tokenizer.encode
    return next(i for i, (x, y) in enumerate(zip(encode(a), encode(b), strict=False)) if x != y)


def test_a_guess_at_restricted_text_learns_nothing_from_the_prefix_cache(live):
    admin = live.key("root", role=Role.ADMIN)
    for text, title, groups in ((MEMO, "Board memo", ["board"]), (PUBLIC, "Globex", ["staff"])):
        body = {"text": text, "title": title, "doc_id": title.lower().replace(" ", "-")}
        body["acl"] = {"groups": groups}
        response = httpx.post(live.url + "/v1/documents", json=body, headers=_headers(admin))
        assert response.status_code == 201, response.text
    memo_id = httpx.get(live.url + "/v1/documents", headers=_headers(admin)).json()["data"]
    memo_id = next(d["id"] for d in memo_id if d["title"] == "Board memo")
    bob = live.key("bob", ("staff", "board"))
    alice = live.key("alice", ("staff",))

    # The prompt bob's answer runs, rebuilt as an attacker would from the open prompt format.
    state = live.state
    bob_access = access_for(Principal("bob", frozenset({"staff", "board"}), "default", "reader", 0))
    chunks = state.rag.retriever.retrieve(bob_access, QUESTION).chunks
    evidence = state.rag.answers.selector.select(QUESTION, chunks)
    prompt = state.rag.answers.builder.build(QUESTION, [s.as_source() for s in evidence])
    assert any(s.chunk.doc_id == memo_id for s in prompt.sources)
    memo_n = next(s.n for s in prompt.sources if s.chunk.doc_id == memo_id)
    cut = prompt.text[: prompt.text.index(f"</source {memo_n}>")]
    assert "120" in cut
    block = live.engine.config.block_size
    shared = prompt.narrowing[0][0] // block * block  # the system prompt's full blocks
    assert shared > 0

    def probe(template: str, figures: tuple[str, ...]) -> list[int]:
        """cached_tokens of alice's guesses, each sent once: a wrong one first, so the guesses
        after it share her own blocks alike, then the true figure and another wrong one."""
        return [_cached_tokens(live, alice, template.replace("120", f)) for f in figures]

    # Before bob asks (guessing the memo is another source, so these prompts part early from
    # the later guesses): the true figure gets what a wrong one gets.
    elsewhere = cut.replace(f"<source n={memo_n} ", f"<source n={memo_n + 1} ")
    before = probe(elsewhere, ("130", "120", "999"))
    assert before[1] == before[2]
    first = _answer(live, bob)
    assert first["usage"]["prompt_tokens"] == len(prompt.token_ids)
    # After: the first guess gets only the tenant's shared instructions, and the true figure
    # no more than a wrong one, whatever bob's answer left in the cache.
    after = probe(cut, ("777", "120", "555"))
    own = _common_prefix(live, elsewhere, cut) // block * block  # from her earlier guesses
    assert after[0] == max(shared, own)
    assert after[1] == after[2] < len(live.engine.tokenizer.encode(cut)) - block

    # The same reader asking again reuses all of its blocks.
    again = _answer(live, bob)["usage"]
    assert again["prompt_tokens_details"]["cached_tokens"] >= again["prompt_tokens"] - block

    # The board group loses the memo; bob keeps it by name. Same text, new readers: new salt.
    response = httpx.put(
        f"{live.url}/v1/documents/{memo_id}/acl", json={"users": ["bob"]}, headers=_headers(admin)
    )
    assert response.status_code == 200, response.text
    renewed = _answer(live, bob)["usage"]
    assert renewed["prompt_tokens"] == again["prompt_tokens"]
    assert renewed["prompt_tokens_details"]["cached_tokens"] < renewed["prompt_tokens"] - block
