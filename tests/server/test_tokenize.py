"""POST /tokenize and /detokenize: the same tokens the completion endpoints count, back to the
same text, and clear refusals."""

import httpx
import pytest

MODEL = "smollm2-135m-instruct"
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Name three colours."},
]


@pytest.fixture(scope="module")
def headers(server):
    return {"Authorization": f"Bearer {server.key('counter')}"}


def post(server, headers, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=headers, timeout=60)


def test_a_text_and_its_tokens_round_trip(server, headers):
    text = "Tokenizers split words: unbelievable!"
    reply = post(server, headers, "/tokenize", {"model": MODEL, "prompt": text})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["tokens"] == server.engine.tokenizer.encode(text)
    assert body["count"] == len(body["tokens"]) and body["token_strs"] is None
    assert body["max_model_len"] == server.engine.max_model_len
    back = post(server, headers, "/detokenize", {"model": MODEL, "tokens": body["tokens"]})
    assert back.status_code == 200 and back.json() == {"prompt": text}
    named = post(
        server, headers, "/tokenize", {"model": MODEL, "prompt": text, "return_token_strs": True}
    )
    assert len(named.json()["token_strs"]) == body["count"]


def test_a_conversation_counts_what_a_chat_completion_counts(server, headers):
    counted = post(server, headers, "/tokenize", {"model": MODEL, "messages": MESSAGES}).json()
    chat = post(
        server,
        headers,
        "/v1/chat/completions",
        {"model": MODEL, "messages": MESSAGES, "max_tokens": 1},
    ).json()
    assert counted["count"] == chat["usage"]["prompt_tokens"]
    without = post(
        server,
        headers,
        "/tokenize",
        {"model": MODEL, "messages": MESSAGES, "add_generation_prompt": False},
    ).json()
    assert without["count"] < counted["count"]
    assert counted["tokens"][: without["count"]] == without["tokens"]
    tool = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    with_tools = post(
        server, headers, "/tokenize", {"model": MODEL, "messages": MESSAGES, "tools": [tool]}
    ).json()
    assert with_tools["count"] > counted["count"]


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/tokenize", {"model": MODEL}, 400, "prompt or messages"),
        ("/tokenize", {"model": MODEL, "prompt": "a", "messages": MESSAGES}, 400, "not both"),
        ("/tokenize", {"model": "nope", "prompt": "a"}, 404, "not served"),
        ("/detokenize", {"model": MODEL, "tokens": [10**9]}, 400, "49152"),
        ("/detokenize", {"model": MODEL, "tokens": "abc"}, 400, "tokens"),
    ],
)
def test_bad_requests_are_refused_with_the_reason(server, headers, path, body, status, words):
    reply = post(server, headers, path, body)
    assert reply.status_code == status, reply.text
    assert words in reply.json()["error"]["message"]


def test_a_key_is_needed(server):
    reply = httpx.post(server.url + "/tokenize", json={"model": MODEL, "prompt": "a"}, timeout=30)
    assert reply.status_code == 401
