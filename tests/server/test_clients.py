"""ragserve driven by the clients people point at OpenAI-compatible servers: guidellm (load
tests), LangChain and LlamaIndex. Each must get correct results, never a silent all-zero run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MODEL = "smollm2-135m-instruct"
EMBEDDING_MODEL = "all-minilm-l6-v2"
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def key(server):
    return server.key("tools")


@pytest.mark.parametrize("request_format", ["/v1/chat/completions", "/v1/completions"])
def test_guidellm_benchmark_completes_every_request(server, key, tmp_path, request_format):
    report = tmp_path / "guidellm.json"
    backend = (
        f"kind=openai_http,target={server.url},model={MODEL},api_key={key},"
        f"request_format={request_format}"
    )
    command = [
        str(Path(sys.executable).parent / "guidellm"),
        "run",
        "--backend",
        backend,
        "--profile",
        "kind=concurrent,streams=2",
        "--constraint",
        "kind=max_requests,count=4",
        "--data",
        "kind=synthetic_text,prompt_tokens=32,output_tokens=16",
        "--tokenizer",
        f"kind=hf_auto,model={server.engine.model_path}",
        "--output",
        f"kind=json,path={report}",
        "--disable-console",
    ]
    env = os.environ | {"HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    benchmark = json.loads(report.read_text())["benchmarks"][0]
    made = benchmark["scheduler_metrics"]["requests_made"]
    assert (made["successful"], made["errored"], made["incomplete"]) == (4, 0, 0)
    # The scheduler's counts above are every request; guidellm's metrics cover the requests
    # inside its measured window, whose edge is set by a completion time and can leave out a
    # request that ended at it.
    metrics = benchmark["metrics"]
    assert metrics["request_totals"]["errored"] == metrics["request_totals"]["incomplete"] == 0
    # guidellm asks for exactly 16 tokens (ignore_eos) and reads the usage the server reports.
    assert metrics["output_token_count"]["successful"]["mean"] == 16
    assert metrics["prompt_token_count"]["successful"]["mean"] >= 32
    server.wait_idle()


def test_langchain_chat_and_embeddings(server, key):
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings

    chat = ChatOpenAI(
        model=MODEL,
        base_url=server.url + "/v1",
        api_key=key,
        temperature=0,
        max_tokens=16,
        stream_usage=True,
        max_retries=0,
    )
    reply = chat.invoke(QUESTION)
    assert "Paris" in reply.content
    assert reply.response_metadata["finish_reason"] == "stop"
    assert reply.usage_metadata["output_tokens"] > 0
    chunks = list(chat.stream(QUESTION))
    assert "".join(c.content for c in chunks) == reply.content
    usage = [c.usage_metadata for c in chunks if c.usage_metadata]
    assert usage[-1]["output_tokens"] == reply.usage_metadata["output_tokens"]

    # check_embedding_ctx_length=False: by default LangChain tokenizes with OpenAI's tiktoken
    # (downloaded at run time) and sends OpenAI token ids, which mean nothing to another model.
    embeddings = OpenAIEmbeddings(
        model=EMBEDDING_MODEL,
        base_url=server.url + "/v1",
        api_key=key,
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    documents = embeddings.embed_documents(["a cat sleeps", "stock markets fell"])
    query = embeddings.embed_query("a kitten naps")
    assert len(documents) == 2 and len(query) == 384
    cat, market = (sum(a * b for a, b in zip(d, query, strict=True)) for d in documents)
    assert cat > market


def test_llamaindex_openai_like_chat_and_completion(server, key):
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.openai_like import OpenAILike

    common = {"model": MODEL, "api_base": server.url + "/v1", "api_key": key, "max_retries": 0}
    chat = OpenAILike(**common, is_chat_model=True, temperature=0, max_tokens=16)
    message = [ChatMessage(role="user", content=QUESTION)]
    reply = chat.chat(message).message.content
    assert "Paris" in reply
    assert "".join(c.delta for c in chat.stream_chat(message)) == reply
    text = OpenAILike(**common, is_chat_model=False, temperature=0, max_tokens=8)
    completed = text.complete("The capital of France is").text
    assert "Paris" in completed
    assert "".join(c.delta or "" for c in text.stream_complete("The capital of France is")) == (
        completed
    )
    server.wait_idle()
