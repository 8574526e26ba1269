"""The API through the official openai client, and raw HTTP for the error cases."""

import httpx
import openai
import pytest

from ragserve.access import Role
from ragserve.server.limits import AuthThrottle

MODEL = "smollm2-135m-instruct"
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def alice(server):
    return server.key("alice", ("eng",))


def client(server, key) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def test_chat_completion_with_usage(server, alice):
    reply = client(server, alice).chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=32, temperature=0
    )
    text = reply.choices[0].message.content
    assert "Paris" in text
    assert reply.choices[0].finish_reason == "stop"
    tokenizer = server.engine.tokenizer
    prompt_ids = tokenizer.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert reply.usage.prompt_tokens == len(prompt_ids)
    # The end-of-turn token counts as generated but is not part of the text.
    assert reply.usage.completion_tokens == len(tokenizer.encode(text)) + 1
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_chat_streaming_matches_non_streaming(server, alice):
    api = client(server, alice)
    # Another user, so the streamed request is generated rather than replayed from the cache.
    whole = client(server, server.key("bob")).chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=30, temperature=0
    )
    chunks = list(
        api.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=30,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3


def test_text_completion_streaming_and_not(server, alice):
    api = client(server, alice)
    whole = api.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=12, temperature=0
    )
    assert whole.usage.completion_tokens == 12
    assert whole.choices[0].finish_reason == "length"
    streamed = "".join(
        c.choices[0].text
        for c in api.completions.create(
            model=MODEL,
            prompt="The capital of France is",
            max_tokens=12,
            temperature=0,
            stream=True,
        )
        if c.choices
    )
    assert streamed == whole.choices[0].text


def test_models_and_embeddings(server, alice):
    api = client(server, alice)
    ids = [m.id for m in api.models.list().data]
    assert MODEL in ids and "all-minilm-l6-v2" in ids
    result = api.embeddings.create(model="all-minilm-l6-v2", input=["a cat", "a dog"])
    assert len(result.data) == 2 and len(result.data[0].embedding) == 384
    assert result.usage.prompt_tokens > 0


def test_missing_and_bad_keys_are_401(server):
    response = httpx.post(
        server.url + "/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES}
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "missing_api_key"
    with pytest.raises(openai.AuthenticationError):
        client(server, "rsk-not-a-key").models.list()


def test_repeated_bad_keys_from_one_client_are_throttled(server, alice, monkeypatch):
    monkeypatch.setattr(server.state, "auth_throttle", AuthThrottle(3))
    selector = 'ragserve:requests_rejected_total{reason="auth_failures"}'
    rejected = _metric(server, selector)

    def models(key: str) -> httpx.Response:
        return httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {key}"})

    assert [models(f"rsk-guess-{i}").status_code for i in range(3)] == [401] * 3
    # Past the limit a valid key from the same client waits too: a 200 would confirm a guess.
    refused = models(alice)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "auth_failures"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert _metric(server, selector) == rejected + 1


def test_revoked_key_stops_on_next_request(server):
    key = server.key("mallory")
    api = client(server, key)
    api.models.list()
    key_id = next(r.key_id for r in server.state.keys.list() if r.user == "mallory")
    server.state.keys.revoke(key_id)
    with pytest.raises(openai.AuthenticationError):
        api.models.list()


def test_bad_requests_are_400_with_openai_errors(server, alice):
    headers = {"Authorization": f"Bearer {alice}"}
    cases = [
        {"model": MODEL, "messages": MESSAGES, "max_tokens": 100_000},
        {"model": MODEL, "messages": MESSAGES, "temperature": -1},
        {"model": MODEL, "messages": MESSAGES, "top_p": 0},
        {"model": MODEL, "messages": MESSAGES, "temperature": "hot"},
        {"model": MODEL, "messages": []},
        {"model": MODEL, "messages": [{"role": "user", "content": "word " * 9000}]},
    ]
    for body in cases:
        response = httpx.post(server.url + "/v1/chat/completions", json=body, headers=headers)
        assert response.status_code == 400, (body, response.text)
        error = response.json()["error"]
        assert error["message"] and error["type"] == "invalid_request_error"
    unknown = httpx.post(
        server.url + "/v1/chat/completions",
        headers=headers,
        json={"model": "gpt-4", "messages": MESSAGES},
    )
    assert unknown.status_code == 404
    server.wait_idle()


def test_per_user_concurrency_is_429_with_retry_after(server):
    key = server.key("busy")
    headers = {"Authorization": f"Bearer {key}"}
    body = {
        "model": MODEL,
        "prompt": "Count: 1, 2, 3,",
        "max_tokens": 300,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.Client(timeout=60) as http:
        streams = [
            http.stream("POST", server.url + "/v1/completions", json=body, headers=headers)
            for _ in range(2)
        ]
        responses = [s.__enter__() for s in streams]
        try:
            assert all(r.status_code == 200 for r in responses)
            third = http.post(server.url + "/v1/completions", json=body, headers=headers)
            assert third.status_code == 429
            assert int(third.headers["Retry-After"]) >= 1
            assert third.json()["error"]["type"] == "rate_limit_error"
        finally:
            for s in streams:
                s.__exit__(None, None, None)
    server.wait_idle()


def test_tokens_per_minute_is_429(server):
    api = client(server, server.key("hungry"))
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 300  # ~3000 tokens
    with pytest.raises(openai.RateLimitError) as caught:
        for _ in range(10):
            api.completions.create(model=MODEL, prompt=long_prompt, max_tokens=1)
    assert caught.value.response.headers["Retry-After"]
    server.wait_idle()


def test_per_user_limits_count_each_tenant_apart_and_state_the_callers_own_usage(server):
    # The same name in another tenant is another person: spending its budget leaves this one's
    # whole, and its refusal states its own usage, nobody else's.
    namesake = client(server, server.key("ann", tenant="beta"))
    ann = client(server, server.key("ann"))
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 300  # ~3000 tokens
    spent = 0
    with pytest.raises(openai.RateLimitError) as caught:
        for _ in range(10):
            spent += namesake.completions.create(
                model=MODEL, prompt=long_prompt, max_tokens=1
            ).usage.total_tokens
    message = caught.value.response.json()["error"]["message"]
    assert f"used {spent} tokens" in message
    reply = ann.completions.create(model=MODEL, prompt=long_prompt, max_tokens=1)
    assert reply.usage.prompt_tokens > 0
    server.wait_idle()


def test_disconnect_mid_stream_frees_blocks(server, alice):
    server.wait_idle()
    finished_before = _metric(server, 'ragserve:request_success_total{finished_reason="abort"}')
    body = {
        "model": MODEL,
        "prompt": "Once upon a time",
        "max_tokens": 400,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream(
        "POST",
        server.url + "/v1/completions",
        json=body,
        headers={"Authorization": f"Bearer {alice}"},
        timeout=60,
    ) as response:
        lines = response.iter_lines()
        for _ in range(6):
            next(lines)
        assert server.engine.stats().kv_blocks_used > 0
    server.wait_idle()
    after = _metric(server, 'ragserve:request_success_total{finished_reason="abort"}')
    assert after == finished_before + 1


def test_disconnect_mid_prefill_frees_blocks(server, alice):
    server.wait_idle()
    # ~2,500 prompt tokens at 64 tokens a step: the prefill takes dozens of steps.
    body = {"model": MODEL, "prompt": "alpha beta gamma delta " * 600, "max_tokens": 8}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            server.url + "/v1/completions",
            json=body,
            headers={"Authorization": f"Bearer {alice}"},
            timeout=0.5,
        )
    server.wait_idle(timeout=10)


def test_prefix_cache_is_per_tenant(server):
    prompt = "Shared system preamble: you are a careful assistant. " * 12 + "Question:"
    a1, a2 = client(server, server.key("ta", tenant="tenant-a")), None
    a2 = client(server, server.key("ta2", tenant="tenant-a"))
    b = client(server, server.key("tb", tenant="tenant-b"))
    first = a1.completions.create(model=MODEL, prompt=prompt + " one", max_tokens=2)
    second = a2.completions.create(model=MODEL, prompt=prompt + " two", max_tokens=2)
    other = b.completions.create(model=MODEL, prompt=prompt + " two", max_tokens=2)
    assert first.usage.prompt_tokens > 64
    assert second.usage.prompt_tokens_details.cached_tokens >= 48
    assert other.usage.prompt_tokens_details.cached_tokens == 0


def test_response_cache_per_permission_set(server):
    hits = "ragserve:response_cache_hits_total"
    eng = client(server, server.key("carol", ("eng",)))
    eng_again = client(server, server.key("carol", ("eng",)))
    sales = client(server, server.key("carol", ("sales",)))
    request = {"model": MODEL, "messages": MESSAGES, "max_tokens": 16, "temperature": 0}
    before = _metric(server, hits)
    first = eng.chat.completions.create(**request)
    repeat = eng_again.chat.completions.create(**request)
    assert _metric(server, hits) == before + 1
    assert repeat.choices[0].message.content == first.choices[0].message.content
    sales.chat.completions.create(**request)
    assert _metric(server, hits) == before + 1, "another permission set must miss"
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in eng.chat.completions.create(**request, stream=True)
        if c.choices
    )
    assert streamed == first.choices[0].message.content
    assert _metric(server, hits) == before + 2
    eng.chat.completions.create(**{**request, "temperature": 0.7})
    eng.chat.completions.create(**{**request, "temperature": 0.7})
    assert _metric(server, hits) == before + 2, "random sampling is never cached"


def test_response_cache_separates_an_administrator_from_a_namesake_reader(server):
    # Same user, groups and tenant; only the role differs, and with it what the store shows:
    # the admin's cached answer must not reach the reader, who sees no document at all.
    writer = {"Authorization": f"Bearer {server.key('wanda', tenant='roles', role=Role.WRITER)}"}
    admin = {"Authorization": f"Bearer {server.key('rory', tenant='roles', role=Role.ADMIN)}"}
    reader = {"Authorization": f"Bearer {server.key('rory', tenant='roles')}"}
    note = "The lighthouse keeper's door code is 4417. The keeper changes it every March."
    stored = httpx.post(server.url + "/v1/documents", json={"text": note}, headers=writer)
    assert stored.status_code == 201, stored.text
    question = {"question": "What is the lighthouse keeper's door code?"}

    def ask(headers: dict[str, str]) -> dict:
        response = httpx.post(
            server.url + "/v1/answers", json=question, headers=headers, timeout=120
        )
        assert response.status_code == 200, response.text
        return response.json()

    hits = "ragserve:response_cache_hits_total"
    answered = ask(admin)
    assert not answered["refused"] and answered["citations"]
    before = _metric(server, hits)
    assert ask(admin)["answer"] == answered["answer"]
    assert _metric(server, hits) == before + 1  # the admin's answer is in the cache
    refused = ask(reader)
    assert _metric(server, hits) == before + 1, "the reader must miss the admin's entry"
    assert refused["refused"] and not refused["citations"] and "4417" not in refused["answer"]
    server.wait_idle()


def test_metrics_move(server, alice):
    names = [
        "ragserve:num_requests_running",
        "ragserve:num_requests_waiting",
        "ragserve:kv_cache_usage_perc",
        "ragserve:prefix_cache_queries_total",
        "ragserve:prefix_cache_hits_total",
        "ragserve:time_to_first_token_seconds_count",
        "ragserve:inter_token_latency_seconds_count",
        "ragserve:e2e_request_latency_seconds_count",
        "ragserve:request_queue_time_seconds_count",
        "ragserve:requests_rejected_total",
        "ragserve:response_cache_hits_total",
    ]
    text = httpx.get(server.url + "/metrics").text
    for name in names:
        assert name in text, name
    before = {n: _metric(server, n) for n in names[3:9]}
    client(server, alice).completions.create(
        model=MODEL, prompt="Hello there, ", max_tokens=8, temperature=0.5
    )
    after = {n: _metric(server, n) for n in names[3:9]}
    for name in (
        "ragserve:prefix_cache_queries_total",
        "ragserve:time_to_first_token_seconds_count",
        "ragserve:e2e_request_latency_seconds_count",
        "ragserve:inter_token_latency_seconds_count",
    ):
        assert after[name] > before[name], name


def test_me_says_who_a_key_belongs_to(server):
    key = server.key("mia", ("eng", "design"), tenant="globex", role=Role.WRITER)
    response = httpx.get(server.url + "/v1/me", headers={"Authorization": f"Bearer {key}"})
    assert response.json() == {
        "user": "mia",
        "groups": ["design", "eng"],
        "tenant": "globex",
        "role": "writer",
    }
    assert httpx.get(server.url + "/v1/me").status_code == 401


def test_status_is_for_administrators_and_counts_recent_requests(server, alice):
    admin = {"Authorization": f"Bearer {server.key('root', role=Role.ADMIN)}"}
    refused = httpx.get(server.url + "/v1/status", headers={"Authorization": f"Bearer {alice}"})
    assert refused.status_code == 403 and "administrators" in refused.json()["error"]["message"]
    before = httpx.get(server.url + "/v1/status", headers=admin).json()
    client(server, alice).completions.create(
        model=MODEL, prompt="One, two, three,", max_tokens=6, temperature=0
    )
    after = httpx.get(server.url + "/v1/status", headers=admin).json()
    assert after["recent"]["finished"] == before["recent"]["finished"] + 1
    assert after["model"] == MODEL and after["kv_blocks_total"] > 0
    assert 0.0 <= after["kv_cache_usage"] <= 1.0
    assert 0.0 <= after["prefix_cache_hit_rate"] <= 1.0
    latency = after["recent"]["e2e_ms"]
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"]
    assert after["recent"]["tpot_ms"]["p50"] > 0 and after["recent"]["ttft_ms"]["p50"] > 0


def _metric(server, name: str) -> float:
    """Sum of a metric's samples; name may carry a label selector."""
    total = 0.0
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample == name or ("{" not in name and sample.startswith(name + "{")):
            total += float(value)
    return total


def test_health(server):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
