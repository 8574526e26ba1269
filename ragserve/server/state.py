"""What the routes share: the engine, keys, limits, metrics, caches and the RAG services."""

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ragserve.engine.client import EngineClient
from ragserve.keys import KeyStore
from ragserve.server.limits import AuthThrottle, DemandLimiter
from ragserve.server.metrics import ServerMetrics
from ragserve.server.response_cache import ResponseCache
from ragserve.services import RagServices
from ragserve.serving.documents import DocumentService
from ragserve.settings import Settings


def weights_version(model_path: Path) -> str:
    """Identifies the weights without reading them all: names, sizes and the first MiB."""
    digest = hashlib.sha256()
    for path in sorted(model_path.glob("*.safetensors")):
        digest.update(f"{path.name}:{path.stat().st_size}".encode())
        with path.open("rb") as f:
            digest.update(f.read(1 << 20))
    return digest.hexdigest()[:16]


@dataclass
class ServerState:
    settings: Settings
    engine: EngineClient
    keys: KeyStore
    limiter: DemandLimiter
    auth_throttle: AuthThrottle
    metrics: ServerMetrics
    cache: ResponseCache | None
    model_id: str
    weights_version: str
    template_version: str
    rag: RagServices
    # Unknown request field names already logged (each is logged once).
    logged_ignored_fields: set[str] = field(default_factory=set)

    @property
    def documents(self) -> DocumentService:
        return DocumentService(self.rag.index)

    @property
    def rag_model_id(self) -> str:
        """Chat completions to this model answer from the caller's documents."""
        return self.model_id + "+rag"
