"""A sentence-transformers folder read from its files, and its BERT or MPNet encoder run in
plain torch.

Importing sentence-transformers costs ~5 s (transformers' model machinery, scikit-learn); a
one-question `ragserve ask` would spend most of its time there. A BERT encoder with mean or
CLS pooling is a dozen tensor operations, so folders of that shape (all-MiniLM-L6-v2, BGE,
E5, GTE small) run here, from their safetensors and tokenizer.json, and so does MPNet
(all-mpnet-base-v2, the reader model), which differs only in its weights' names, positions
counted from after the padding id, and a learned bias on each head's attention by bucketed
relative distance; any other folder goes to sentence-transformers. tests/rag/test_encoder.py
holds the two to the same vectors.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

_POOLING_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")
# MPNet's relative attention bias: distances in 32 buckets (16 per direction), exact up to 8
# and logarithmic beyond, up to 128.
_BUCKETS, _MAX_DISTANCE = 32, 128
# Where each architecture keeps a layer's attention weights (under encoder.layer.N.attention).
_ATTENTION_NAMES = {
    "bert": {
        "query": "self.query",
        "key": "self.key",
        "value": "self.value",
        "out": "output.dense",
        "norm": "output.LayerNorm",
    },
    "mpnet": {
        "query": "attn.q",
        "key": "attn.k",
        "value": "attn.v",
        "out": "attn.o",
        "norm": "LayerNorm",
    },
}


@dataclass(frozen=True)
class EncoderFolder:
    """What a sentence-transformers folder's configuration files say, without loading it."""

    path: Path
    modules: tuple[str, ...]  # module kinds in order: Transformer, Pooling, Dense, Normalize, ...
    model_type: str | None
    pooling: tuple[str, ...]  # the pooling modes switched on
    max_seq_length: int | None
    lower_case: bool
    dimension: int | None  # None when the files do not say it plainly
    truncated: bool  # the folder asks for a truncated output (truncate_dim)

    @classmethod
    def read(cls, path: Path) -> "EncoderFolder":
        def config(sub: str, file: str = "config.json") -> dict:
            try:
                return json.loads((path / sub / file).read_text())
            except FileNotFoundError:
                return {}

        modules = config("", "modules.json") or [
            {"type": "Transformer", "path": ""},
            {"type": "Pooling", "path": "1_Pooling"},
        ]
        kinds, model_type, pooling, dimension = [], None, (), None
        for module in modules:
            kind = module["type"].rsplit(".", 1)[-1]
            kinds.append(kind)
            settings = config(module["path"])
            if kind == "Transformer":
                model_type = settings.get("model_type")
                dimension = settings.get("hidden_size")
            elif kind == "Pooling":
                dimension = settings.get("embedding_dimension") or settings.get(
                    "word_embedding_dimension"
                )
                named = settings.get("pooling_mode")
                pooling = (
                    (named if named.endswith("_token") else f"{named}_tokens",)
                    if isinstance(named, str)
                    else tuple(m for m in _POOLING_MODES if settings.get(f"pooling_mode_{m}"))
                )
                if isinstance(dimension, int):
                    dimension *= max(len(pooling), 1)
            elif kind == "Dense":
                dimension = settings.get("out_features")
            elif kind != "Normalize":
                dimension = None
        sentence = config("", "sentence_bert_config.json")
        truncated = config("", "config_sentence_transformers.json").get("truncate_dim") is not None
        return cls(
            path=path,
            modules=tuple(kinds),
            model_type=model_type,
            pooling=pooling,
            max_seq_length=sentence.get("max_seq_length"),
            lower_case=bool(sentence.get("do_lower_case")),
            dimension=None if truncated or not isinstance(dimension, int) else dimension,
            truncated=truncated,
        )

    @property
    def runs_natively(self) -> bool:
        """A BERT or MPNet encoder, one pooling of mean or CLS, maybe a Normalize: the shape
        NativeEncoder runs."""
        shape_fits = self.modules in (
            ("Transformer", "Pooling"),
            ("Transformer", "Pooling", "Normalize"),
        )
        return (
            shape_fits
            and self.model_type in _ATTENTION_NAMES
            and self.pooling in (("mean_tokens",), ("cls_token",))
            and not self.truncated
            and (self.path / "model.safetensors").is_file()
            and (self.path / "tokenizer.json").is_file()
        )


class NativeEncoder:
    """Token embeddings, post-norm transformer layers, pooling: the forward pass of
    transformers' BertModel (or MPNetModel) under sentence-transformers' Pooling, in float32.
    Vectors leave at unit length, as the stores' cosine expects, whether or not the folder has a
    Normalize."""

    def __init__(self, folder: EncoderFolder) -> None:
        import torch
        from safetensors.torch import load_file

        config = json.loads((folder.path / "config.json").read_text())
        if (
            config.get("hidden_act", "gelu") != "gelu"
            or config.get("position_embedding_type", "absolute") != "absolute"
        ):
            raise ValueError(f"{folder.path}: only absolute positions and exact GELU run natively")
        self.folder = folder
        self.architecture = config["model_type"]
        # MPNet counts positions from after its padding id (RoBERTa's convention); BERT from 0.
        self.first_position = config["pad_token_id"] + 1 if self.architecture == "mpnet" else 0
        self.heads = config["num_attention_heads"]
        self.layers = config["num_hidden_layers"]
        self.eps = config.get("layer_norm_eps", 1e-12)
        weights = load_file(folder.path / "model.safetensors")
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self.weights = {k[len(prefix) :]: v.float() for k, v in weights.items()}
        positions = config["max_position_embeddings"] - self.first_position
        self.max_length = min(folder.max_seq_length or positions, positions)
        self.tokenizer = Tokenizer.from_file(str(folder.path / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_length)
        self._torch = torch

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """One row per text; texts are batched by length so padding stays short."""
        if self.folder.lower_case:
            texts = [t.lower() for t in texts]
        encodings = self.tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        out = np.zeros((len(texts), self.folder.dimension or 0), dtype=np.float32)
        with self._torch.inference_mode():
            for first in range(0, len(order), batch_size):
                rows = order[first : first + batch_size]
                out[rows] = self._forward([encodings[i].ids for i in rows]).numpy()
        return out

    def _forward(self, batch: list[list[int]]):
        torch, w = self._torch, self.weights
        F = torch.nn.functional
        length = max(len(ids) for ids in batch)
        ids = torch.zeros((len(batch), length), dtype=torch.long)
        mask = torch.zeros((len(batch), length), dtype=torch.bool)
        for row, tokens in enumerate(batch):
            ids[row, : len(tokens)] = torch.tensor(tokens)
            mask[row, : len(tokens)] = True

        def linear(x, name: str):
            return F.linear(x, w[f"{name}.weight"], w[f"{name}.bias"])

        def norm(x, name: str):
            return F.layer_norm(x, x.shape[-1:], w[f"{name}.weight"], w[f"{name}.bias"], self.eps)

        first = self.first_position
        x = w["embeddings.word_embeddings.weight"][ids]
        x = x + w["embeddings.position_embeddings.weight"][first : first + length]
        if "embeddings.token_type_embeddings.weight" in w:
            x = x + w["embeddings.token_type_embeddings.weight"][0]
        x = norm(x, "embeddings.LayerNorm")
        batch_size, hidden = len(batch), x.shape[-1]
        head_size = hidden // self.heads
        attend = mask[:, None, None, :]
        if "encoder.relative_attention_bias.weight" in w:
            bias = w["encoder.relative_attention_bias.weight"][_distance_buckets(torch, length)]
            attend = bias.permute(2, 0, 1)[None].masked_fill(~attend, float("-inf"))
        names = _ATTENTION_NAMES[self.architecture]
        for layer in range(self.layers):
            at = f"encoder.layer.{layer}"

            def split_heads(t):
                return t.view(batch_size, length, self.heads, head_size).transpose(1, 2)

            q, k, v = (
                split_heads(linear(x, f"{at}.attention.{names[p]}"))
                for p in ("query", "key", "value")
            )
            context = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attend, scale=1 / math.sqrt(head_size)
            )
            context = context.transpose(1, 2).reshape(batch_size, length, hidden)
            x = norm(
                x + linear(context, f"{at}.attention.{names['out']}"),
                f"{at}.attention.{names['norm']}",
            )
            inner = F.gelu(linear(x, f"{at}.intermediate.dense"))
            x = norm(x + linear(inner, f"{at}.output.dense"), f"{at}.output.LayerNorm")
        if self.folder.pooling == ("cls_token",):
            pooled = x[:, 0]
        else:
            weights = mask.unsqueeze(-1).float()
            pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return F.normalize(pooled.float(), dim=-1)


def _distance_buckets(torch, length: int):
    """MPNet's bucket of each (query, key) pair's relative distance, key minus query: one half
    of the buckets for each direction, exact for near distances, logarithmic for far ones."""
    positions = torch.arange(length)
    distance = positions[None, :] - positions[:, None]
    half = _BUCKETS // 2
    exact = half // 2
    ahead = (distance > 0).long() * half
    far = distance.abs()
    scaled = torch.log(far.clamp(min=1).float() / exact) / math.log(_MAX_DISTANCE / exact)
    logarithmic = (exact + (scaled * (half - exact)).long()).clamp(max=half - 1)
    return ahead + torch.where(far < exact, far, logarithmic)
