"""Layers the model architectures share: a linear projection over the CPU kernels, RoPE
tables, and attention over the paged KV cache from a fused q/k/v projection."""

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from transformers import PretrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from ragserve.engine.attention import AttentionMetadata, paged_attention
from ragserve.engine.errors import UnsupportedModelError
from ragserve.engine.kernels import linear, long_input_weight, onednn_layout, packed_long_inputs
from ragserve.engine.kv_cache import LayerCache
from ragserve.engine.packing import pack_int8, small_batch_weight, unpack_pairs

if TYPE_CHECKING:  # models/ builds on these layers; importing it here would be circular
    from ragserve.engine.models.spec import ModelSpec

STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def rope_tables(
    config: PretrainedConfig, head_dim: int, max_len: int, params: dict | None = None
) -> torch.Tensor:
    """cos and sin for positions [0, max_len), as [2, max_len, head_dim] float32; params: the
    RoPE parameters (default: the config's rope_parameters)."""
    params = params if params is not None else getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        raise UnsupportedModelError(
            f"unsupported RoPE type {rope_type!r}; supported: {', '.join(STATIC_ROPE_TYPES)}"
        )
    if rope_type == "default":
        theta = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        scaling = 1.0
    else:
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, torch.device("cpu"))
    freqs = torch.outer(torch.arange(max_len, dtype=torch.float), inv_freq.float())
    angles = torch.cat((freqs, freqs), dim=-1)
    return torch.stack((angles.cos() * scaling, angles.sin() * scaling))


@dataclass
class Projection:
    """A linear layer's weight [N, K] and bias. A bfloat16 weight also keeps a copy laid out
    for oneDNN once at load (`long_input`, kernels.long_input_weight), in float32 on a CPU
    without bfloat16 matmuls: decode-sized inputs stream the weight through the small-batch
    kernel, longer ones multiply the copy instead of reordering (or widening) 200+ MB of
    weights on every forward pass. Where the CPU has bfloat16 dot products the weight itself is
    packed for the small-batch kernel (packing.small_batch_weight); where that kernel also leads
    on long inputs (kernels.packed_long_inputs) it takes them all and no copy is kept.

    An int8 projection (to_int8) holds the weight as int8 with one float32 scale per row, packed
    for its kernel (packing.pack_int8) with the rows' sums, and the rounded values for longer
    inputs."""

    weight: torch.Tensor
    bias: torch.Tensor | None = None
    long_input: torch.Tensor | None = None
    scale: torch.Tensor | None = None
    row_sums: torch.Tensor | None = None

    @classmethod
    def of(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> "Projection":
        long_input = long_input_weight(weight)
        packed = small_batch_weight(weight, long_input)
        if packed.dim() == 4 and packed_long_inputs():
            # The packed kernel takes inputs of every length (kernels.packed_long_inputs).
            return cls(packed, bias)
        return cls(packed, bias, long_input)

    def to_int8(self) -> None:
        """Round the weight to int8 per row, symmetric (scale: the row's largest magnitude /
        127), in place. Decode-sized inputs then stream half the bytes of bfloat16; longer ones
        multiply the rounded values, widened once here to the weight's dtype."""
        dtype = self.weight.dtype
        wide = (unpack_pairs(self.weight) if self.weight.dim() == 4 else self.weight).float()
        scale = wide.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127
        values = torch.round(wide / scale[:, None]).to(torch.int8)
        self.weight, self.row_sums = pack_int8(values)
        self.scale = scale.contiguous()
        rounded = (values.float() * scale[:, None]).to(dtype)
        copy = long_input_weight(rounded)
        # Where the bfloat16 kernel's packing applies, longer inputs multiply the rounded values
        # packed for it, at every length (kernels.linear). A float32 model's rounded values are
        # laid out too: they replace the weight, so the layout costs no memory, and oneDNN on it
        # is 1.2-1.7× MKL on the plain one (AVX2).
        if packed_long_inputs() and (packed := small_batch_weight(rounded, copy)).dim() == 4:
            self.long_input = packed
        else:
            self.long_input = onednn_layout(rounded) if copy is None else copy

    def __call__(
        self, x: torch.Tensor, out_dtype: torch.dtype | None = None, invariant: bool = False
    ) -> torch.Tensor:
        return linear(
            x,
            self.weight,
            self.bias,
            out_dtype,
            invariant,
            self.long_input,
            self.scale,
            self.row_sums,
        )


def attend(
    qkv: torch.Tensor,
    spec: "ModelSpec",
    kv_cache: LayerCache,
    meta: AttentionMetadata,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """A fused q/k/v projection's output ([tokens, (heads + 2 kv_heads) * head_dim], RoPE
    applied) through paged attention: [tokens, heads * head_dim] in qkv's dtype."""
    return paged_attention(qkv, spec.num_heads, spec.num_kv_heads, kv_cache, meta, scale, window)
