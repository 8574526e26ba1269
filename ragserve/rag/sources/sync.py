"""One sync of a source: the index brought in line with the source's files.

- A file whose modified time and size are what the last sync saw costs a stat; if its path's
  ACL in the map changed, the document is re-permissioned (no parse, no embedding).
- Any other file is read and ingested under its stable id (source + path): unchanged text and
  ACL write nothing; changed text re-embeds only the chunks whose text changed.
- A document of the source whose file is gone is deleted at this sync. Which documents are the
  source's is read from the store (their ids carry the source's prefix), so a document written
  by a sync that died before recording it is still found.
- A file that cannot be read or parsed is reported with the reason; its indexed version (if
  any) stays, and the next sync tries it again.
"""

import hashlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ragserve.rag.documents import AccessFilter, Acl
from ragserve.rag.ingest import Ingestor, IngestResult, SourceDocument
from ragserve.rag.sources.acl_map import AclMap, acl_digest
from ragserve.rag.sources.folder import FolderConnector, SourceFile
from ragserve.rag.sources.registry import FileState, SourceConfig, SourceRegistry
from ragserve.rag.store import Store


@dataclass
class SyncReport:
    source: str
    added: int = 0
    changed: int = 0
    deleted: int = 0
    unchanged: int = 0
    repermissioned: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)
    embedded_chunks: int = 0
    reused_chunks: int = 0
    seconds: float = 0.0
    finished_at: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def source_doc_id(config: SourceConfig, path: str) -> str:
    """A file's document id: the same for the same source and path, at every sync."""
    return config.doc_id_prefix + hashlib.sha256(path.encode()).hexdigest()[:24]


class SourceSync:
    def __init__(self, store: Store, ingestor: Ingestor, registry: SourceRegistry) -> None:
        self.store = store
        self.ingestor = ingestor
        self.registry = registry

    def run(
        self, config: SourceConfig, progress: Callable[[int, int], None] | None = None
    ) -> SyncReport:
        """Sync one source; progress(done, total) after each file."""
        started = time.perf_counter()
        report = SyncReport(config.name)
        operator = AccessFilter(config.tenant, "sync", everything=True)
        acl_map = AclMap.from_json(config.acl_map)
        files = {
            f.path: f
            for f in FolderConnector(
                Path(config.folder), tuple(config.include), tuple(config.exclude)
            ).files()
        }
        seen = self.registry.files(config)
        stored = {
            d.doc_id
            for d in self.store.list_documents(operator)
            if d.doc_id.startswith(config.doc_id_prefix)
        }
        pending: dict[str, list[tuple[SourceFile, str]]] = {}
        acls: dict[str, Acl] = {}
        for path, file in files.items():
            acl, doc_id = acl_map.acl_for(path), source_doc_id(config, path)
            digest = acl_digest(acl)
            state = seen.get(path)
            if state is not None and doc_id in stored and _same_stat(state, file):
                if state.acl_digest != digest:
                    self.store.set_acl(operator, doc_id, acl)
                    self.registry.saw(config, path, _state(doc_id, file, digest))
                    report.repermissioned += 1
                else:
                    report.unchanged += 1
                continue
            acls[digest] = acl
            pending.setdefault(digest, []).append((file, doc_id))
        done = report.unchanged + report.repermissioned
        for digest, group in pending.items():
            results = self._ingest(config, group, acls[digest], operator)
            for (file, doc_id), result in zip(group, results, strict=True):
                self._count(report, result, doc_id in stored)
                if result.ok:
                    self.registry.saw(config, file.path, _state(doc_id, file, digest))
                done += 1
                if progress is not None:
                    progress(done, len(files))
        current = {source_doc_id(config, path) for path in files}
        for doc_id in sorted(stored - current):
            self.store.delete_document(operator, doc_id)
            report.deleted += 1
        for path in seen.keys() - files.keys():
            self.registry.forget(config, path)
        report.seconds = round(time.perf_counter() - started, 3)
        report.finished_at = time.time()
        self.registry.report(config, report.as_json())
        return report

    def _ingest(
        self,
        config: SourceConfig,
        group: list[tuple[SourceFile, str]],
        acl: Acl,
        operator: AccessFilter,
    ) -> list[IngestResult]:
        items = []
        for file, doc_id in group:
            try:
                items.append(SourceDocument(file.path, data=file.read(), doc_id=doc_id))
            except OSError as error:
                reason = f"{file.path}: cannot read ({error.strerror})"
                items.append(SourceDocument(file.path, doc_id=doc_id, error=reason))
        return self.ingestor.ingest_many(
            items, config.tenant, config.owner, acl, writer=operator, skip_unchanged=True
        )

    @staticmethod
    def _count(report: SyncReport, result: IngestResult, existed: bool) -> None:
        if not result.ok:
            report.failed.append({"path": result.source, "reason": result.error or ""})
        elif result.unchanged:
            report.unchanged += 1
        else:
            report.embedded_chunks += result.embedded
            report.reused_chunks += result.reused
            if existed:
                report.changed += 1
            else:
                report.added += 1


def _same_stat(state: FileState, file: SourceFile) -> bool:
    return (state.modified_ns, state.size) == (file.modified_ns, file.size)


def _state(doc_id: str, file: SourceFile, digest: str) -> FileState:
    return FileState(doc_id, file.modified_ns, file.size, digest)
