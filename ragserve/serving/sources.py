"""Sources for the HTTP routes and the server's own schedule: a tenant's administrators list,
add, sync and remove the tenant's sources; a folder added over HTTP must lie under the
source_folders_root setting and a website be on a host of source_url_hosts (a tenant's
administrator is not the server's operator, so may not make the server read any folder or
address it can)."""

import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ragserve.access import Principal, Role
from ragserve.rag.sources.registry import SourceConfig, SourceError, SourceRegistry
from ragserve.rag.sources.sync import SourceSync, SyncReport
from ragserve.services import DocumentIndex
from ragserve.serving.errors import Conflict, Forbidden, Invalid, NotFound, Unavailable


class SourceService:
    """Blocking calls (a sync parses and embeds): an async caller runs them on a worker
    thread. Syncs run one at a time."""

    def __init__(
        self,
        index: DocumentIndex,
        registry: SourceRegistry,
        folders_root: Path | None,
        url_hosts: list[str] | tuple[str, ...] = (),
    ) -> None:
        self.registry = registry
        self.folders_root = folders_root.resolve() if folders_root else None
        self.url_hosts = frozenset(host.lower() for host in url_hosts)
        self._failed_at: dict[tuple[str, str], float] = {}
        self._sync = SourceSync(index.store, index.ingestor, registry)
        self._one_at_a_time = threading.Lock()

    def listed(self, who: Principal) -> list[tuple[SourceConfig, dict[str, Any] | None]]:
        _require_admin(who)
        return self.registry.all(who.tenant)

    def add(self, who: Principal, config: SourceConfig) -> SourceConfig:
        _require_admin(who)
        if config.url is not None:
            self._check_host(config.url)
        else:
            config.folder = str(self._folder_under_root(config.folder or ""))
        config.tenant, config.owner = who.tenant, who.account
        try:
            self.registry.add(config)
        except SourceError as error:
            raise Conflict(str(error), "source_exists") from error
        return config

    def change(
        self, who: Principal, name: str, changes: dict[str, Any]
    ) -> tuple[SourceConfig, dict[str, Any] | None]:
        """The source with its settings changed (the fields of SourceConfig named in changes),
        and its last report."""
        _require_admin(who)
        config = self._get(who, name)
        for field_name, value in changes.items():
            setattr(config, field_name, value)
        self.registry.update(config)
        return config, self.registry.last_report(config)

    def sync(self, who: Principal, name: str) -> SyncReport:
        _require_admin(who)
        return self.run(self._get(who, name))

    def remove(self, who: Principal, name: str) -> None:
        _require_admin(who)
        self._get(who, name)
        self.registry.remove(who.tenant, name)

    def run(self, config: SourceConfig) -> SyncReport:
        with self._one_at_a_time:
            try:
                return self._sync.run(config)
            except FileNotFoundError as error:
                self._failed(config)
                raise Invalid(f"{error}; nothing was changed", "source_folder_missing") from error
            except OSError as error:  # the site did not answer
                self._failed(config)
                raise Unavailable(str(error), "source_unavailable") from error
            except Exception:
                self._failed(config)
                raise

    def _failed(self, config: SourceConfig) -> None:
        """A failed sync writes no report: remember when it failed, so that its next turn on
        the schedule is an interval on, not at the next check."""
        self._failed_at[(config.tenant, config.name)] = time.time()

    def _folder_under_root(self, folder: str) -> Path:
        if self.folders_root is None:
            raise Forbidden(
                "folder sources are added from the command line here (`ragserve sync add`); "
                "set source_folders_root to allow folders under it",
                "sources_disabled",
            )
        resolved = (self.folders_root / folder).resolve()
        if not resolved.is_relative_to(self.folders_root):
            raise Invalid(
                f"folder {folder!r} is outside source_folders_root", "folder_outside_root"
            )
        return resolved

    def _check_host(self, url: str) -> None:
        host = (urlsplit(url).hostname or "").lower()
        if host not in self.url_hosts:
            raise Forbidden(
                f"websites are added over HTTP only on the hosts of source_url_hosts, not "
                f"{host!r}; `ragserve sync add --url` adds any",
                "source_host_not_allowed",
            )

    def due(self, now: float | None = None) -> list[SourceConfig]:
        """Sources whose interval has passed since their last sync or failed attempt (never
        synced: due)."""
        now = time.time() if now is None else now
        due = []
        for config, report in self.registry.all():
            last = max(
                report["finished_at"] if report else 0.0,
                self._failed_at.get((config.tenant, config.name), 0.0),
            )
            if config.every_s and last + config.every_s <= now:
                due.append(config)
        return due

    def _get(self, who: Principal, name: str) -> SourceConfig:
        try:
            return self.registry.get(who.tenant, name)
        except SourceError as error:
            raise NotFound(str(error), "source_not_found") from error


def _require_admin(who: Principal) -> None:
    if who.role is not Role.ADMIN:
        raise Forbidden(
            f"sources are for administrators; this key's role is {who.role.value}", "forbidden"
        )
