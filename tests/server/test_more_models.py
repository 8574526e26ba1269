"""A second architecture served beside the default model (setting also_serve): listed by
/v1/models, each completion on its own engine, an unknown model refused with the names."""

import httpx
import pytest

from ragserve import LLM, SamplingParams
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.settings import Settings
from tests.server.conftest import start_server

KV_BYTES = 1024 * 46080  # 1,024 tokens of the default model; 1,280 of Gemma 3 270M


@pytest.fixture(scope="module")
def two_models(tmp_path_factory, embedder):
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        dtype="float32",
        kv_cache_memory_bytes=KV_BYTES,
        also_serve=["gemma-3-270m"],
    )
    engine = LLMEngine(EngineConfig(dtype="float32", kv_cache_memory_bytes=KV_BYTES))
    yield from start_server(settings, engine, embedder)


def test_both_models_are_listed_and_each_answers_with_its_own_weights(two_models):
    headers = {"Authorization": f"Bearer {two_models.key('u1')}"}
    listed = httpx.get(two_models.url + "/v1/models", headers=headers).json()["data"]
    ids = [card["id"] for card in listed]
    assert "smollm2-135m-instruct" in ids and "gemma-3-270m" in ids
    gemma_card = next(card for card in listed if card["id"] == "gemma-3-270m")
    assert gemma_card["max_model_len"] == 1280
    prompt = "The capital of France is"
    expected = (
        LLM("gemma-3-270m", "float32", kv_cache_memory_bytes=KV_BYTES)
        .generate(prompt, SamplingParams(max_tokens=12, temperature=0))[0]
        .outputs[0]
        .text
    )
    texts = {}
    for model in ("gemma-3-270m", "smollm2-135m-instruct"):
        body = {"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0}
        reply = httpx.post(two_models.url + "/v1/completions", json=body, headers=headers)
        assert reply.status_code == 200, reply.text
        assert reply.json()["model"] == model
        texts[model] = reply.json()["choices"][0]["text"]
    assert texts["gemma-3-270m"] == expected
    assert texts["gemma-3-270m"] != texts["smollm2-135m-instruct"]


def test_an_unknown_model_is_refused_with_the_served_names(two_models):
    headers = {"Authorization": f"Bearer {two_models.key('u2')}"}
    body = {"model": "nope", "prompt": "x", "max_tokens": 1}
    reply = httpx.post(two_models.url + "/v1/completions", json=body, headers=headers)
    assert reply.status_code == 404
    message = reply.json()["error"]["message"]
    assert "'smollm2-135m-instruct'" in message and "'gemma-3-270m'" in message
