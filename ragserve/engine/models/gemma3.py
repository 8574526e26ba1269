"""Gemma 3 (text): the decoder of Gemma 3 270M over the paged KV cache.

What differs from Llama: embeddings scaled by sqrt(hidden_size); RMSNorm weights applied as
(1 + w), four norms per layer (before and after attention, before and after the MLP, the
"after" ones on the branch before it joins the residual stream); per-head RMSNorm of queries
and keys before RoPE; attention scaled by query_pre_attn_scalar^-1/2; a GELU (tanh) gated MLP;
and layers of two kinds (config.layer_types): sliding-window layers attend to their last
`sliding_window` positions with one RoPE base, full layers to everything with another.
"""

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from transformers import PretrainedConfig

from ragserve.engine.attention import AttentionMetadata
from ragserve.engine.kernels import add_rms_norm, rope_in_place
from ragserve.engine.kv_cache import LayerCache
from ragserve.engine.layers import Projection, attend, rope_tables
from ragserve.engine.models.spec import ModelSpec

SLIDING = "sliding_attention"


class Gemma3Model:
    def __init__(
        self,
        spec: ModelSpec,
        config: PretrainedConfig,
        weights: dict[str, torch.Tensor],
        dtype: torch.dtype,
        max_len: int,
    ) -> None:
        self.spec = spec
        self.scale = config.query_pre_attn_scalar**-0.5
        self.window = config.sliding_window
        self.sliding = [kind == SLIDING for kind in config.layer_types]
        self.embed_scale = torch.tensor(config.hidden_size**0.5, dtype=dtype)

        def take(name: str) -> torch.Tensor:
            return weights[name].to(dtype).contiguous()

        def norm(name: str) -> torch.Tensor:
            # Gemma scales by (1 + w): folded in once here, so the fused kernel applies it.
            return (weights[name].float() + 1.0).to(dtype).contiguous()

        self.embed = take("model.embed_tokens.weight")
        self.lm_head = Projection.of(self.embed)
        self.final_norm = norm("model.norm.weight")
        self.layers = []
        for i in range(spec.num_layers):
            p = f"model.layers.{i}."
            attn = [f"{p}self_attn.{n}_proj.weight" for n in ("q", "k", "v")]
            self.layers.append(
                {
                    "input_norm": norm(p + "input_layernorm.weight"),
                    "post_attention_norm": norm(p + "post_attention_layernorm.weight"),
                    "pre_mlp_norm": norm(p + "pre_feedforward_layernorm.weight"),
                    "post_mlp_norm": norm(p + "post_feedforward_layernorm.weight"),
                    "q_norm": weights[p + "self_attn.q_norm.weight"].float() + 1.0,
                    "k_norm": weights[p + "self_attn.k_norm.weight"].float() + 1.0,
                    "qkv": Projection.of(torch.cat([take(a) for a in attn])),
                    "o_proj": Projection.of(take(p + "self_attn.o_proj.weight")),
                    "gate_up": Projection.of(
                        torch.cat(
                            [take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")]
                        )
                    ),
                    "down": Projection.of(take(p + "mlp.down_proj.weight")),
                }
            )
        ropes = config.rope_parameters
        self.rope = {
            kind: rope_tables(config, spec.head_dim, max_len, ropes[kind])
            for kind in set(config.layer_types)
        }
        self.layer_kinds = list(config.layer_types)
        self.next_norms = [layer["input_norm"] for layer in self.layers[1:]] + [self.final_norm]

    @classmethod
    def spec_of(cls, config: PretrainedConfig) -> ModelSpec:
        return ModelSpec.from_config(config, bool(getattr(config, "attention_bias", False)))

    @classmethod
    def from_weights(
        cls,
        weights: dict[str, torch.Tensor],
        config: PretrainedConfig,
        dtype: torch.dtype,
        max_len: int,
    ) -> "Gemma3Model":
        return cls(cls.spec_of(config), config, weights, dtype, max_len)

    def _head_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm of each head ([tokens, heads * head_dim]) in float32, as Gemma computes it."""
        heads = x.float().unflatten(1, (-1, self.spec.head_dim))
        normed = heads * torch.rsqrt(heads.pow(2).mean(-1, keepdim=True) + self.spec.rms_norm_eps)
        return (normed * weight).flatten(1).to(x.dtype)

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
        q_size = spec.num_heads * spec.head_dim
        kv_size = spec.num_kv_heads * spec.head_dim
        eps = spec.rms_norm_eps
        hidden = F.embedding(input_ids, self.embed) * self.embed_scale
        x = add_rms_norm(hidden, None, self.layers[0]["input_norm"], eps)
        for layer, kind, sliding, next_norm, kv_cache in zip(
            self.layers, self.layer_kinds, self.sliding, self.next_norms, kv_layers, strict=True
        ):
            qkv = layer["qkv"](x, invariant=invariant)
            qkv[:, :q_size] = self._head_norm(qkv[:, :q_size], layer["q_norm"])
            qkv[:, q_size : q_size + kv_size] = self._head_norm(
                qkv[:, q_size : q_size + kv_size], layer["k_norm"]
            )
            heads = spec.num_heads + spec.num_kv_heads
            rope_in_place(qkv, positions, self.rope[kind], heads, spec.head_dim)
            window = self.window if sliding else None
            attn = attend(qkv, spec, kv_cache, meta, self.scale, window)
            attn_out = layer["o_proj"](attn, invariant=invariant)
            attn_out = add_rms_norm(attn_out, None, layer["post_attention_norm"], eps)
            x = add_rms_norm(hidden, attn_out, layer["pre_mlp_norm"], eps)
            gate, up = layer["gate_up"](x, invariant=invariant).chunk(2, dim=-1)
            mlp_out = layer["down"](F.gelu(gate, approximate="tanh") * up, invariant=invariant)
            mlp_out = add_rms_norm(mlp_out, None, layer["post_mlp_norm"], eps)
            x = add_rms_norm(hidden, mlp_out, next_norm, eps)
        return x

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        return self.lm_head(hidden, out_dtype=torch.float32, invariant=invariant)

    def projections(self) -> Iterator[Projection]:
        yield self.lm_head
        for layer in self.layers:
            yield from (layer["qkv"], layer["o_proj"], layer["gate_up"], layer["down"])
