"""What OpenAI-ecosystem clients send beyond the basics: unknown fields (ignored and named),
vLLM's sampling extensions, n > 1, echo, usage on every chunk, embeddings by token ids, and the
fields that are refused because ragserve cannot honour them."""

import base64
import json

import httpx
import numpy as np
import openai
import pytest

MODEL = "smollm2-135m-instruct"
EMBEDDING_MODEL = "all-minilm-l6-v2"
MESSAGES = [{"role": "user", "content": "Name three colours."}]
IGNORED = "x-ragserve-ignored-fields"


@pytest.fixture(scope="module")
def headers(server):
    return {"Authorization": f"Bearer {server.key('carol', ('eng',))}"}


def post(server, headers, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=headers, timeout=120)


def events(response: httpx.Response) -> list[dict]:
    lines = [line.removeprefix("data: ") for line in response.text.splitlines() if line]
    assert lines[-1] == "[DONE]", response.text
    return [json.loads(line) for line in lines[:-1]]


def test_unknown_fields_are_ignored_and_named(server, headers):
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Hi", "name": "carol"}],
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True, "x": 1},
        "guided_novelty": {"a": 1},
    }
    response = post(server, headers, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert response.headers[IGNORED] == "guided_novelty, stream_options.x, messages.name"
    plain = post(server, headers, "/v1/chat/completions", {**body, "stream": False})
    assert plain.status_code == 200 and IGNORED in plain.headers
    clean = {k: v for k, v in body.items() if k != "guided_novelty"}
    clean["stream_options"] = {"include_usage": True}
    clean["messages"] = MESSAGES
    assert IGNORED not in post(server, headers, "/v1/chat/completions", clean).headers
    text = post(server, headers, "/v1/completions", {"model": MODEL, "prompt": "A", "foo": 1})
    assert text.status_code == 200 and text.headers[IGNORED] == "foo"
    server.wait_idle()


def test_strict_request_fields_refuses_unknown_fields(server, headers):
    settings = server.state.settings
    settings.strict_request_fields = True
    try:
        response = post(
            server, headers, "/v1/completions", {"model": MODEL, "prompt": "A", "foo": 1}
        )
    finally:
        settings.strict_request_fields = False
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unknown_field" and error["param"] == "foo"
    assert "strict_request_fields" in error["message"]


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        ("/v1/chat/completions", {"top_logprobs": 3}, None),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("/v1/chat/completions", {"tools": [{"type": "function"}]}, "tools"),
        ("/v1/chat/completions", {"tool_choice": "required"}, "tool_choice"),
        ("/v1/chat/completions", {"response_format": {"type": "yaml"}}, "response_format"),
        ("/v1/chat/completions", {"n": 17}, "n"),
        ("/v1/chat/completions", {"use_beam_search": True}, "use_beam_search"),
        ("/v1/chat/completions", {"presence_penalty": 3}, "presence_penalty"),
        ("/v1/chat/completions", {"repetition_penalty": 0}, "repetition_penalty"),
        ("/v1/chat/completions", {"logit_bias": {"5": 200}}, "logit_bias"),
        ("/v1/chat/completions", {"min_tokens": 50, "max_tokens": 10}, None),
        ("/v1/completions", {"logprobs": 21}, "logprobs"),
        ("/v1/completions", {"suffix": "end"}, "suffix"),
        ("/v1/completions", {"best_of": 3}, None),
    ],
)
def test_what_cannot_be_honoured_is_a_400_naming_the_field(server, headers, path, extra, param):
    base = {"model": MODEL, "max_tokens": 4}
    base |= {"messages": MESSAGES} if "chat" in path else {"prompt": "Hello"}
    response = post(server, headers, path, base | extra)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    name = param or next(iter(extra))
    assert name in error["message"], error
    if param:
        assert error["param"].startswith(param), error


def test_logit_bias_token_outside_the_vocabulary(server, headers):
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 2, "logit_bias": {"999999": 5}}
    response = post(server, headers, "/v1/completions", body)
    assert response.status_code == 400 and "logit_bias" in response.json()["error"]["message"]


def test_continuous_usage_stats_puts_usage_on_every_chunk(server, headers):
    body = {
        "model": MODEL,
        "prompt": "Once upon a time",
        "max_tokens": 8,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    chunks = events(post(server, headers, "/v1/completions", body))
    generated = [c for c in chunks if c["choices"]]
    assert generated and all("usage" in c for c in generated)
    counts = [c["usage"]["completion_tokens"] for c in generated]
    assert counts == sorted(counts) and counts[-1] == 8
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 8


def test_min_tokens_and_logit_bias(server, headers):
    eos = server.engine.tokenizer.eos_token_id
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 20, "temperature": 0}
    body["logit_bias"] = {str(eos): 100}
    ends = post(server, headers, "/v1/completions", body).json()
    assert ends["usage"]["completion_tokens"] == 1
    held = post(server, headers, "/v1/completions", body | {"min_tokens": 4}).json()
    assert held["usage"]["completion_tokens"] == 5
    assert held["choices"][0]["finish_reason"] == "stop"


def test_n_choices_streamed_and_not(server, headers):
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 12, "n": 3, "seed": 7}
    whole = post(server, headers, "/v1/chat/completions", body).json()
    texts = [c["message"]["content"] for c in whole["choices"]]
    assert [c["index"] for c in whole["choices"]] == [0, 1, 2]
    assert len(set(texts)) > 1
    assert whole["usage"]["completion_tokens"] >= 3
    chunks = events(post(server, headers, "/v1/chat/completions", body | {"stream": True}))
    streamed = ["", "", ""]
    finishes = [0, 0, 0]
    for chunk in chunks:
        for choice in chunk["choices"]:
            streamed[choice["index"]] += choice["delta"].get("content") or ""
            finishes[choice["index"]] += choice["finish_reason"] is not None
    # The stream was the cache's replay or a new run with the same seeds: the same texts.
    assert streamed == texts and finishes == [1, 1, 1]
    server.wait_idle()


def test_echo_sends_the_prompt_back(server, headers):
    body = {"model": MODEL, "prompt": "The sky is", "max_tokens": 5, "temperature": 0}
    plain = post(server, headers, "/v1/completions", body).json()["choices"][0]["text"]
    echoed = post(server, headers, "/v1/completions", body | {"echo": True}).json()
    assert echoed["choices"][0]["text"] == "The sky is" + plain
    chunks = events(post(server, headers, "/v1/completions", body | {"echo": True, "stream": True}))
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "The sky is" + plain


@pytest.mark.parametrize("bad_id", [-5, 10**12])
def test_echo_of_token_ids_outside_the_vocabulary_is_a_400(server, headers, bad_id):
    body = {"model": MODEL, "prompt": [1, bad_id, 2], "max_tokens": 2, "echo": True}
    response = post(server, headers, "/v1/completions", body)
    assert response.status_code == 400
    assert "prompt token ids must lie in" in response.json()["error"]["message"]


def test_stop_options(server, headers):
    body = {"model": MODEL, "prompt": "1, 2, 3, 4,", "max_tokens": 12, "temperature": 0}
    text = post(server, headers, "/v1/completions", body).json()["choices"][0]["text"]
    assert " 6" in text, text
    cut = post(server, headers, "/v1/completions", body | {"stop": [" 6"]}).json()
    assert cut["choices"][0]["text"] == text[: text.index(" 6")]
    kept = post(
        server,
        headers,
        "/v1/completions",
        body | {"stop": [" 6"], "include_stop_str_in_output": True},
    ).json()
    assert kept["choices"][0]["text"] == text[: text.index(" 6") + 2]
    first = server.engine.tokenizer.encode(text, add_special_tokens=False)[0]
    by_id = post(server, headers, "/v1/completions", body | {"stop_token_ids": [first]}).json()
    assert by_id["usage"]["completion_tokens"] == 1 and by_id["choices"][0]["text"] == ""


def test_embeddings_as_langchain_and_llamaindex_send_them(server, headers, embedder):
    text = "a small red bicycle"
    ids = embedder.tokenizer.encode(text).ids
    by_text = post(server, headers, "/v1/embeddings", {"model": EMBEDDING_MODEL, "input": text})
    by_ids = post(server, headers, "/v1/embeddings", {"model": EMBEDDING_MODEL, "input": [ids]})
    flat = post(server, headers, "/v1/embeddings", {"model": EMBEDDING_MODEL, "input": ids})
    vectors = [np.array(r.json()["data"][0]["embedding"]) for r in (by_text, by_ids, flat)]
    assert np.allclose(vectors[0], vectors[1], atol=1e-5) and np.allclose(vectors[1], vectors[2])
    packed = post(
        server,
        headers,
        "/v1/embeddings",
        {"model": EMBEDDING_MODEL, "input": text, "encoding_format": "base64", "dimensions": 384},
    ).json()["data"][0]["embedding"]
    assert np.allclose(np.frombuffer(base64.b64decode(packed), "<f4"), vectors[0], atol=1e-6)
    short = post(
        server,
        headers,
        "/v1/embeddings",
        {"model": EMBEDDING_MODEL, "input": text, "dimensions": 256},
    )
    assert short.status_code == 400 and short.json()["error"]["param"] == "dimensions"
    foreign = post(
        server, headers, "/v1/embeddings", {"model": EMBEDDING_MODEL, "input": [[100_000]]}
    )
    assert foreign.status_code == 400 and "vocabulary" in foreign.json()["error"]["message"]


def test_models_carry_what_clients_read(server, headers):
    models = httpx.get(server.url + "/v1/models", headers=headers).json()["data"]
    chat = next(m for m in models if m["id"] == MODEL)
    assert chat["owned_by"] and chat["max_model_len"] == server.engine.max_model_len
    api = openai.OpenAI(base_url=server.url + "/v1", api_key=headers["Authorization"][7:])
    assert api.models.retrieve(MODEL).id == MODEL
