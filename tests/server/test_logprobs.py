"""Log-probabilities through the API, read by the openai SDK and by lm-evaluation-harness: chat's
logprobs / top_logprobs (whole and streamed), text completions' logprobs with echo, and
loglikelihood equal to transformers' float32 model."""

import json

import httpx
import openai
import pytest
import torch

MODEL = "smollm2-135m-instruct"
MESSAGES = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def key(server):
    return server.key("evaluator")


@pytest.fixture(scope="module")
def client(server, key):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key)


@pytest.fixture(scope="module")
def reference(server):
    """Per prompt, transformers' float32 log-probabilities of every next token."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(server.engine.model_path, dtype=torch.float32)

    def logprobs(token_ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(hf(torch.tensor([token_ids])).logits[0].float(), dim=-1)

    return logprobs


def test_chat_logprobs_parse_in_the_sdk(client):
    reply = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0, logprobs=True, top_logprobs=5
    )
    choice = reply.choices[0]
    content = choice.logprobs.content
    assert len(content) == reply.usage.completion_tokens
    assert "".join(entry.token for entry in content) == choice.message.content
    for entry in content:
        assert len(entry.top_logprobs) == 5
        assert entry.top_logprobs[0].token == entry.token  # greedy: the chosen is the top one
        assert entry.logprob == max(top.logprob for top in entry.top_logprobs) <= 0
        assert bytes(entry.bytes).decode() == entry.token
    plain = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)
    assert plain.choices[0].logprobs is None


@pytest.mark.parametrize("stop", [None, [" and the end of it"]])
def test_top_logprobs_stream(client, stop):
    """Every token's entry once, also while a possible stop string holds its text back."""
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        stop=stop,
        max_tokens=12,
        temperature=0.7,
        seed=5,
        logprobs=True,
        top_logprobs=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    entries, text, usage = [], "", None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.logprobs is not None:
                entries += choice.logprobs.content
    assert len(entries) == usage.completion_tokens
    assert "".join(entry.token for entry in entries) == text
    assert all(len(entry.top_logprobs) == 5 for entry in entries)


def test_top_logprobs_needs_logprobs(client):
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, top_logprobs=2)


def test_echo_returns_the_prompt_tokens_log_probabilities(server, client, reference):
    prompt = server.engine.tokenizer.encode("The capital of France is Paris. The capital of")
    reply = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=2, temperature=0, logprobs=1, echo=True
    )
    logprobs = reply.choices[0].logprobs
    assert len(logprobs.tokens) == len(prompt) + 2
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    expected = reference(prompt)
    for position, token in enumerate(prompt[1:]):
        got = logprobs.token_logprobs[position + 1]
        assert got == pytest.approx(expected[position, token].item(), abs=1e-3)
    assert reply.choices[0].text.startswith(server.engine.tokenizer.decode(prompt))
    offsets = logprobs.text_offset
    assert offsets[0] == 0 and offsets == sorted(offsets)


def test_echo_logprobs_stream_sends_the_prompt_with_the_first_tokens(server, key):
    body = {
        "model": MODEL,
        "prompt": "One, two, three,",
        "max_tokens": 3,
        "temperature": 0,
        "logprobs": 0,
        "echo": True,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {key}"}
    response = httpx.post(server.url + "/v1/completions", json=body, headers=headers, timeout=60)
    lines = [ln.removeprefix("data: ") for ln in response.text.splitlines() if ln]
    chunks = [json.loads(line) for line in lines[:-1]]
    first = chunks[0]["choices"][0]
    assert first["text"].startswith("One, two, three,")
    prompt_len = len(server.engine.tokenizer.encode(body["prompt"]))
    tokens = sum(len(c["choices"][0]["logprobs"]["tokens"]) for c in chunks if c["choices"])
    assert tokens == prompt_len + 3
    assert first["logprobs"]["token_logprobs"][0] is None


LOGLIKELIHOOD_ITEMS = [
    {"context": "The capital of France is", "continuation": " Paris"},
    {"context": "The capital of France is", "continuation": " Berlin, the city of bears"},
    {"context": "Water boils at one hundred degrees", "continuation": " Celsius at sea level."},
    {"context": "Question: What is 2 + 2?\nAnswer:", "continuation": " 4"},
    {"context": "def add(a, b):\n   ", "continuation": " return a + b"},
    {"context": "Once upon a time", "continuation": " there was a dragon who loved tea."},
]

TASK = """task: ragserve_loglikelihood
dataset_path: json
dataset_kwargs:
  data_files:
    test: {items}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{continuation}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def test_lm_evaluation_harness_loglikelihood_equals_transformers(
    server, key, reference, tmp_path, monkeypatch
):
    """lm-evaluation-harness's local-completions model (echo, logprobs, token-id prompts), on a
    task file written here: no hub access."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(item) + "\n" for item in LOGLIKELIHOOD_ITEMS))
    (tmp_path / "task.yaml").write_text(TASK.format(items=items))
    model_path = server.engine.model_path
    results = lm_eval.simple_evaluate(
        model="local-completions",
        model_args=(
            f"model={MODEL},base_url={server.url}/v1/completions,tokenizer={model_path},"
            "tokenizer_backend=huggingface,num_concurrent=1,max_retries=1"
        ),
        tasks=["ragserve_loglikelihood"],
        task_manager=TaskManager(include_path=str(tmp_path)),
        log_samples=True,
    )
    samples = results["samples"]["ragserve_loglikelihood"]
    assert len(samples) == len(LOGLIKELIHOOD_ITEMS)
    tokenizer = server.engine.tokenizer
    for sample in samples:
        context, continuation = sample["arguments"][0]
        # The harness moves the context's trailing whitespace into the continuation, and
        # tokenizes the two together.
        stripped = context.rstrip()
        whole = tokenizer.encode(context + continuation, add_special_tokens=False)
        ctx = tokenizer.encode(stripped, add_special_tokens=False)
        cont = whole[len(ctx) :]
        expected = reference(whole)
        want = sum(expected[len(ctx) - 1 + i, t].item() for i, t in enumerate(cont))
        greedy = all(expected[len(ctx) - 1 + i].argmax().item() == t for i, t in enumerate(cont))
        loglikelihood, is_greedy = sample["resps"][0][0]
        assert loglikelihood == pytest.approx(want, abs=1e-3), sample["doc"]
        assert is_greedy == greedy


def test_a_cached_reply_keeps_its_logprobs(server, client):
    hits = server.state.metrics.response_cache_hits
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say a short word."}],
        "max_tokens": 4,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
    }
    first = client.chat.completions.create(**request)
    before = hits._value.get()
    again = client.chat.completions.create(**request)
    assert hits._value.get() == before + 1
    assert again.choices[0].logprobs == first.choices[0].logprobs
    stream = client.chat.completions.create(**request, stream=True)
    streamed = [
        e for chunk in stream for c in chunk.choices if c.logprobs for e in c.logprobs.content
    ]
    assert streamed == first.choices[0].logprobs.content
    without = client.chat.completions.create(**{**request, "logprobs": False, "top_logprobs": None})
    assert without.choices[0].logprobs is None
