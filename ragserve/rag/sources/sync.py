"""One sync of a source: the index brought in line with the source's items (a folder's
files, a website's pages; connector.py).

- An item whose stamp is what the last sync saw (a file's modified time and size), or that the
  source itself says is unchanged (a page's 304), costs that check; if its path's ACL in the
  map changed, the document is re-permissioned (no parse, no embedding).
- Any other item is read and ingested under its stable id (source + path): unchanged text and
  ACL write nothing; changed text re-embeds only the chunks whose text changed.
- A document of the source whose item is gone is deleted at this sync, when the listing was
  complete (a crawl cut short by its page cap deletes nothing). Which documents are the
  source's is read from the store (their ids carry the source's prefix), so a document written
  by a sync that died before recording it is still found.
- An item that cannot be read, fetched or parsed is reported with the reason; its indexed
  version (if any) stays, and the next sync tries it again.
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
from ragserve.rag.sources.connector import Connector, SourceItem
from ragserve.rag.sources.folder import FolderConnector
from ragserve.rag.sources.registry import ItemState, SourceConfig, SourceRegistry
from ragserve.rag.sources.web import WebConnector
from ragserve.rag.store import Store

REPERMIT_BATCH = 500
LISTING_PAGE = 1000


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
    # False when the listing was cut short (a crawl's page cap): nothing unseen was deleted.
    complete: bool = True

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def source_doc_id(config: SourceConfig, path: str) -> str:
    """An item's document id: the same for the same source and path, at every sync."""
    return config.doc_id_prefix + hashlib.sha256(path.encode()).hexdigest()[:24]


class SourceSync:
    def __init__(self, store: Store, ingestor: Ingestor, registry: SourceRegistry) -> None:
        self.store = store
        self.ingestor = ingestor
        self.registry = registry

    def run(
        self, config: SourceConfig, progress: Callable[[int, int], None] | None = None
    ) -> SyncReport:
        """Sync one source; progress(done, total) after each item."""
        started = time.perf_counter()
        report = SyncReport(config.name)
        operator = AccessFilter(config.tenant, "sync", everything=True)
        acl_map = AclMap.from_json(config.acl_map)
        seen = self.registry.items(config)
        connector = self.connector(config)
        items = {i.path: i for i in connector.items({p: s.stamp for p, s in seen.items()})}
        stored = self._stored_ids(config, operator)
        pending: dict[str, list[tuple[SourceItem, str]]] = {}
        acls: dict[str, Acl] = {}
        repermitted: list[tuple[str, Acl, ItemState]] = []
        for path, item in items.items():
            acl, doc_id = acl_map.acl_for(path), source_doc_id(config, path)
            digest = acl_digest(acl)
            state = seen.get(path)
            if item.error is not None:
                report.failed.append({"path": path, "reason": item.error})
            elif state is not None and doc_id in stored and _unchanged(state, item):
                if state.acl_digest != digest:
                    repermitted.append((path, acl, ItemState(doc_id, item.stamp, digest)))
                else:
                    report.unchanged += 1
            else:
                acls[digest] = acl
                pending.setdefault(digest, []).append((item, doc_id))
        report.repermissioned = self._repermit(config, operator, repermitted)
        done = len(items) - sum(len(group) for group in pending.values())
        for digest, group in pending.items():
            results = self._ingest(config, group, acls[digest], operator)
            written = []
            for (item, doc_id), result in zip(group, results, strict=True):
                self._count(report, result, doc_id in stored)
                if result.ok:
                    written.append((item.path, ItemState(doc_id, item.stamp, digest)))
                done += 1
                if progress is not None:
                    progress(done, len(items))
            self.registry.saw(config, written)
        if connector.complete:
            current = {source_doc_id(config, path) for path in items}
            for doc_id in sorted(stored - current):
                self.store.delete_document(operator, doc_id)
                report.deleted += 1
            for path in seen.keys() - items.keys():
                self.registry.forget(config, path)
        else:
            report.complete = False
        report.seconds = round(time.perf_counter() - started, 3)
        report.finished_at = time.time()
        self.registry.report(config, report.as_json())
        return report

    def _repermit(
        self,
        config: SourceConfig,
        operator: AccessFilter,
        changes: list[tuple[str, Acl, ItemState]],
    ) -> int:
        """New ACLs for unchanged items whose path's grants changed, a few hundred documents
        per store transaction (one per document made a re-sync of thousands wait on as many
        commits); each batch recorded once stored."""
        for first in range(0, len(changes), REPERMIT_BATCH):
            batch = changes[first : first + REPERMIT_BATCH]
            self.store.set_acls(operator, [(state.doc_id, acl) for _, acl, state in batch])
            self.registry.saw(config, [(path, state) for path, _, state in batch])
        return len(changes)

    def _stored_ids(self, config: SourceConfig, operator: AccessFilter) -> set[str]:
        """The ids of the source's documents in the store: the ids with its prefix, read in
        id order from the prefix on (pages of the tenant's listing), not the whole tenant."""
        found: set[str] = set()
        after = config.doc_id_prefix
        while page := self.store.list_documents(operator, after, LISTING_PAGE):
            ids = [d.doc_id for d in page]
            found.update(i for i in ids if i.startswith(config.doc_id_prefix))
            if not ids[-1].startswith(config.doc_id_prefix):
                break
            after = ids[-1]
        return found

    @staticmethod
    def connector(config: SourceConfig) -> Connector:
        if config.url is not None:
            return WebConnector(
                config.url,
                tuple(config.include),
                tuple(config.exclude),
                config.max_pages,
                config.max_depth,
            )
        return FolderConnector(
            Path(config.folder or ""), tuple(config.include), tuple(config.exclude)
        )

    def _ingest(
        self,
        config: SourceConfig,
        group: list[tuple[SourceItem, str]],
        acl: Acl,
        operator: AccessFilter,
    ) -> list[IngestResult]:
        documents = []
        for item, doc_id in group:
            try:
                read = SourceDocument(
                    item.path,
                    item.read(),
                    doc_id=doc_id,
                    kind=item.kind,
                    modified_at=item.modified_at,
                )
                documents.append(read)
            except OSError as error:
                reason = f"{item.path}: cannot read ({error.strerror or error})"
                documents.append(SourceDocument(item.path, doc_id=doc_id, error=reason))
        return self.ingestor.ingest_many(
            documents, config.tenant, config.owner, acl, writer=operator, skip_unchanged=True
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


def _unchanged(state: ItemState, item: SourceItem) -> bool:
    return item.unchanged or state.stamp == item.stamp
