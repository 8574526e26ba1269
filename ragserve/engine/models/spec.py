"""What the engine needs to know of a model, whatever its architecture: its shape (ModelSpec,
which sizes the KV cache) and what a model does with a step (DecoderModel)."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from transformers import PretrainedConfig

from ragserve.engine.attention import AttentionMetadata
from ragserve.engine.kv_cache import LayerCache

if TYPE_CHECKING:  # layers.py reads ModelSpec; importing it at run time would be circular
    from ragserve.engine.layers import Projection


@dataclass
class ModelSpec:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    max_position_embeddings: int
    qkv_bias: bool
    tie_word_embeddings: bool

    @classmethod
    def from_config(cls, config: PretrainedConfig, qkv_bias: bool) -> "ModelSpec":
        heads = config.num_attention_heads
        return cls(
            hidden_size=config.hidden_size,
            num_layers=config.num_hidden_layers,
            num_heads=heads,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            vocab_size=config.vocab_size,
            rms_norm_eps=config.rms_norm_eps,
            max_position_embeddings=config.max_position_embeddings,
            qkv_bias=qkv_bias,
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        )


class DecoderModel(Protocol):
    """A decoder over the paged KV cache: every scheduled token of a step, prefill and decode,
    in one forward pass; invariant asks for batch-invariant results (see models/llama.py)."""

    spec: ModelSpec

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        kv_layers: list[LayerCache],
        invariant: bool = False,
    ) -> torch.Tensor: ...

    def logits(self, hidden: torch.Tensor, invariant: bool = False) -> torch.Tensor: ...

    def projections(self) -> "Iterator[Projection]":
        """Every linear layer, the vocabulary projection included (what quantization rounds)."""
        ...


class ModelClass(Protocol):
    """An architecture as the registry holds it: its shape from a config, and the model built
    from weights."""

    def spec_of(self, config: PretrainedConfig) -> ModelSpec: ...

    def from_weights(
        self,
        weights: dict[str, torch.Tensor],
        config: PretrainedConfig,
        dtype: torch.dtype,
        max_len: int,
    ) -> DecoderModel: ...
