"""The Llama decoder (Llama, SmolLM2, and the base of Qwen2) over the paged KV cache.

All scheduled tokens of a step, prefill and decode, go through each projection as one matmul;
q/k/v and gate/up are fused at load time so a layer costs four matmuls.

Batch-invariant mode (`invariant`): a token's logits are then the same bits whatever else is in
its step, however its prompt was chunked and whichever of its blocks came from the prefix
cache, so greedy decoding gives a request the same tokens every time (same weights, dtype and
CPU kernels). Attention, norms, RoPE and SiLU are per-token already (attention.py); only the
matmuls need it, and they get it from the small-batch kernel at every size (kernels.linear),
which costs speed on long prompt chunks.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PretrainedConfig

from ragserve.engine.attention import AttentionMetadata
from ragserve.engine.kernels import add_rms_norm, rope_in_place, silu_mul
from ragserve.engine.kv_cache import LayerCache
from ragserve.engine.layers import Projection, attend, rope_tables
from ragserve.engine.models.spec import ModelSpec


@dataclass
class LayerWeights:
    input_norm: torch.Tensor
    qkv: Projection
    o_proj: Projection
    post_norm: torch.Tensor
    gate_up: Projection
    down: Projection


class LlamaModel:
    # Whether the q/k/v projections always carry biases; otherwise the config's attention_bias.
    QKV_BIAS = False

    def __init__(
        self,
        spec: ModelSpec,
        weights: dict[str, torch.Tensor],
        rope: torch.Tensor,
        dtype: torch.dtype,
    ) -> None:
        self.spec = spec
        self.scale = 1.0 / math.sqrt(spec.head_dim)

        def take(name: str) -> torch.Tensor:
            return weights[name].to(dtype).contiguous()

        self.embed = take("model.embed_tokens.weight")
        self.norm = take("model.norm.weight")
        self.lm_head = Projection.of(
            self.embed
            if spec.tie_word_embeddings or "lm_head.weight" not in weights
            else take("lm_head.weight")
        )
        self.layers = []
        for i in range(spec.num_layers):
            p = f"model.layers.{i}."
            attn = [f"{p}self_attn.{n}_proj" for n in ("q", "k", "v")]
            self.layers.append(
                LayerWeights(
                    input_norm=take(p + "input_layernorm.weight"),
                    qkv=Projection.of(
                        torch.cat([take(a + ".weight") for a in attn]),
                        torch.cat([take(a + ".bias") for a in attn]) if spec.qkv_bias else None,
                    ),
                    o_proj=Projection.of(take(p + "self_attn.o_proj.weight")),
                    post_norm=take(p + "post_attention_layernorm.weight"),
                    gate_up=Projection.of(
                        torch.cat(
                            [take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")]
                        )
                    ),
                    down=Projection.of(take(p + "mlp.down_proj.weight")),
                )
            )
        self.rope = rope  # float32, as the RoPE kernel reads it
        # What each layer's last residual add feeds: the next layer's input norm, or the final one.
        self.next_norms = [layer.input_norm for layer in self.layers[1:]] + [self.norm]

    @classmethod
    def from_weights(
        cls,
        weights: dict[str, torch.Tensor],
        config: PretrainedConfig,
        dtype: torch.dtype,
        max_len: int,
    ) -> "LlamaModel":
        spec = cls.spec_of(config)
        return cls(spec, weights, rope_tables(config, spec.head_dim, max_len), dtype)

    @classmethod
    def spec_of(cls, config: PretrainedConfig) -> ModelSpec:
        return ModelSpec.from_config(
            config, cls.QKV_BIAS or bool(getattr(config, "attention_bias", False))
        )

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        kv_layers: list[LayerCache],
        invariant: bool = False,
    ) -> torch.Tensor:
        spec = self.spec
        eps = spec.rms_norm_eps
        hidden = F.embedding(input_ids, self.embed)
        x = add_rms_norm(hidden, None, self.layers[0].input_norm, eps)
        for layer, next_norm, kv_cache in zip(self.layers, self.next_norms, kv_layers, strict=True):
            qkv = layer.qkv(x, invariant=invariant)
            rope_in_place(
                qkv, positions, self.rope, spec.num_heads + spec.num_kv_heads, spec.head_dim
            )
            attn = attend(qkv, spec, kv_cache, meta, self.scale)
            attn_out = layer.o_proj(attn, invariant=invariant)
            x = add_rms_norm(hidden, attn_out, layer.post_norm, eps)
            gate_up = layer.gate_up(x, invariant=invariant)
            mlp_out = layer.down(silu_mul(gate_up), invariant=invariant)
            x = add_rms_norm(hidden, mlp_out, next_norm, eps)
        return x

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        return self.lm_head(hidden, out_dtype=torch.float32, invariant=invariant)

    def projections(self) -> Iterator[Projection]:
        yield self.lm_head
        for layer in self.layers:
            yield from (layer.qkv, layer.o_proj, layer.gate_up, layer.down)
