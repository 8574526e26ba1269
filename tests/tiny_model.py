"""A tiny Llama with random weights and the default model's tokenizer: the engine's mechanics
(scheduling, the KV pool, the prefix cache, aborts, limits) exercised in milliseconds per step
instead of the real model's tens. What it writes is meaningless; tests on it assert mechanics,
never text."""

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
)
SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
}
# float32 KV bytes per token: layers x (key, value) x kv heads x head_dim x 4 bytes.
KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 32 * 4


def make_tiny_llama(folder: Path, tokenizer_source: Path, seed: int = 0) -> Path:
    """Write the model into folder (made if missing) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (tokenizer_source / name).is_file():
            shutil.copy(tokenizer_source / name, folder / name)
    config = json.loads((tokenizer_source / "config.json").read_text()) | SHAPE
    config["max_position_embeddings"] = 2048
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    generator = torch.Generator().manual_seed(seed)

    def random(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * 0.05

    hidden, inner = SHAPE["hidden_size"], SHAPE["intermediate_size"]
    head_dim = SHAPE["head_dim"]
    q_width = SHAPE["num_attention_heads"] * head_dim
    kv_width = SHAPE["num_key_value_heads"] * head_dim
    weights = {
        "model.embed_tokens.weight": random(config["vocab_size"], hidden),
        "model.norm.weight": torch.ones(hidden),
    }
    for layer in range(SHAPE["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        weights |= {
            p + "input_layernorm.weight": torch.ones(hidden),
            p + "post_attention_layernorm.weight": torch.ones(hidden),
            p + "self_attn.q_proj.weight": random(q_width, hidden),
            p + "self_attn.k_proj.weight": random(kv_width, hidden),
            p + "self_attn.v_proj.weight": random(kv_width, hidden),
            p + "self_attn.o_proj.weight": random(hidden, q_width),
            p + "mlp.gate_proj.weight": random(inner, hidden),
            p + "mlp.up_proj.weight": random(inner, hidden),
            p + "mlp.down_proj.weight": random(hidden, inner),
        }
    save_file(weights, folder / "model.safetensors")
    return folder
