"""The model architectures the engine runs, chosen by the name in a model config's
`architectures` (as vLLM's registry does). A new architecture is a module here, built from the
shared layers (engine/layers.py), and one line in REGISTRY."""

import torch
from transformers import PretrainedConfig

from ragserve.engine.errors import UnsupportedModelError
from ragserve.engine.memory import in_huge_pages
from ragserve.engine.models.gemma3 import Gemma3Model
from ragserve.engine.models.llama import LlamaModel
from ragserve.engine.models.qwen2 import Qwen2Model
from ragserve.engine.models.spec import DecoderModel, ModelClass, ModelSpec

REGISTRY: dict[str, ModelClass] = {
    "LlamaForCausalLM": LlamaModel,
    "Qwen2ForCausalLM": Qwen2Model,
    "Gemma3ForCausalLM": Gemma3Model,
}


def model_class(architectures: list[str] | None) -> ModelClass:
    """The class for the first of the config's architectures that the engine runs."""
    for name in architectures or []:
        if name in REGISTRY:
            return REGISTRY[name]
    raise UnsupportedModelError(
        f"unsupported architecture {list(architectures or [])}; supported: " + ", ".join(REGISTRY)
    )


def spec_of(config: PretrainedConfig) -> ModelSpec:
    return model_class(config.architectures).spec_of(config)


def build_model(
    weights: dict[str, torch.Tensor],
    config: PretrainedConfig,
    dtype: torch.dtype,
    max_len: int,
    quantization: str = "none",
) -> DecoderModel:
    """The model for the config's architecture; quantization "int8" rounds every projection's
    weight to int8 (Projection.to_int8)."""
    model = model_class(config.architectures).from_weights(weights, config, dtype, max_len)
    if quantization == "int8":
        for projection in model.projections():
            projection.to_int8()
    # Packed weights, and int8 projections' packed copies for longer inputs, are the kernels'
    # own (no embedding shares them): move them into huge pages together, weights first.
    packed = [
        (projection, field)
        for field in ("weight", "long_input")
        for projection in model.projections()
        if (tensor := getattr(projection, field)) is not None and tensor.dim() == 4
    ]
    moved = in_huge_pages([getattr(projection, field) for projection, field in packed])
    for (projection, field), tensor in zip(packed, moved, strict=True):
        setattr(projection, field, tensor)
    return model
