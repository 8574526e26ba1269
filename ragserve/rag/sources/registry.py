"""The sources a data folder follows, and what each sync last saw of each item, in
`data_dir/sources.sqlite`.

What an item was at its last sync (its connector's stamp, the ACL digest it got) only saves work:
the store stays the truth of what is indexed. A sync that dies between writing a document and
recording it here reads the file again next time; a document whose record was never written
is found by its id's source prefix.
"""

import json
import re
import sqlite3
import threading
from dataclasses import asdict, astuple, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ragserve.rag.sources.acl_map import AclMap
from ragserve.sqlite_db import connect, transaction

SOURCE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


class SourceError(ValueError):
    pass


@dataclass
class SourceConfig:
    """A source: a folder (`folder`) or a website (`url`: its sitemap, or a crawl from the
    page within max_depth links and max_pages pages)."""

    name: str
    folder: str | None = None
    tenant: str = "default"
    owner: str = "admin"
    acl_map: dict[str, Any] = field(default_factory=lambda: AclMap.from_json({}).to_json())
    include: list[str] = field(default_factory=lambda: ["*"])
    exclude: list[str] = field(default_factory=list)
    # Seconds between syncs when the server runs them; None: only on request.
    every_s: float | None = None
    url: str | None = None
    max_pages: int = 1000
    max_depth: int = 5

    def __post_init__(self) -> None:
        if not SOURCE_NAME.fullmatch(self.name):
            raise SourceError(
                f"a source name is 1-64 letters, digits, '.', '_' or '-': {self.name!r}"
            )
        if (self.folder is None) == (self.url is None):
            raise SourceError("a source is a folder or a url, one of the two")
        if self.url is not None and not _web_url(self.url):
            raise SourceError(f"a source url is http:// or https:// with a host: {self.url!r}")

    @property
    def location(self) -> str:
        return self.folder or self.url or ""

    @property
    def doc_id_prefix(self) -> str:
        return f"source:{self.name}:"


@dataclass(frozen=True)
class ItemState:
    doc_id: str
    stamp: str
    acl_digest: str


class SourceRegistry:
    def __init__(self, path: Path) -> None:
        self._db = connect(path)
        self._lock = threading.Lock()
        with transaction(self._db, self._lock, write=True) as db:
            db.execute(
                """CREATE TABLE IF NOT EXISTS sources (
                tenant TEXT NOT NULL, name TEXT NOT NULL, config TEXT NOT NULL,
                last_report TEXT, PRIMARY KEY (tenant, name))"""
            )
            _migrate_files(db)

    def add(self, config: SourceConfig) -> None:
        with transaction(self._db, self._lock, write=True) as db:
            key = (config.tenant, config.name)
            if db.execute("SELECT 1 FROM sources WHERE tenant = ? AND name = ?", key).fetchone():
                raise SourceError(f"a source named {config.name!r} exists")
            db.execute(
                "INSERT INTO sources (tenant, name, config) VALUES (?, ?, ?)",
                (*key, json.dumps(asdict(config))),
            )

    def update(self, config: SourceConfig) -> None:
        """Change a source's settings (its ACL map, globs, interval); what its items were at
        the last sync is kept, so an ACL-map change costs a re-permission, not a re-read."""
        with transaction(self._db, self._lock, write=True) as db:
            changed = db.execute(
                "UPDATE sources SET config = ? WHERE tenant = ? AND name = ?",
                (json.dumps(asdict(config)), config.tenant, config.name),
            ).rowcount
        if not changed:
            raise SourceError(f"no source named {config.name!r}")

    def get(self, tenant: str, name: str) -> SourceConfig:
        with transaction(self._db, self._lock, write=False) as db:
            row = db.execute(
                "SELECT config FROM sources WHERE tenant = ? AND name = ?", (tenant, name)
            ).fetchone()
        if row is None:
            raise SourceError(f"no source named {name!r}")
        return SourceConfig(**json.loads(row[0]))

    def all(self, tenant: str | None = None) -> list[tuple[SourceConfig, dict[str, Any] | None]]:
        """The tenant's sources (every tenant's: None) with their last sync's report (None
        before the first)."""
        with transaction(self._db, self._lock, write=False) as db:
            rows = db.execute(
                "SELECT config, last_report FROM sources WHERE tenant = coalesce(?, tenant)"
                " ORDER BY tenant, name",
                (tenant,),
            ).fetchall()
        return [(SourceConfig(**json.loads(c)), json.loads(r) if r else None) for c, r in rows]

    def last_report(self, config: SourceConfig) -> dict[str, Any] | None:
        with transaction(self._db, self._lock, write=False) as db:
            row = db.execute(
                "SELECT last_report FROM sources WHERE tenant = ? AND name = ?",
                (config.tenant, config.name),
            ).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    def remove(self, tenant: str, name: str) -> None:
        with transaction(self._db, self._lock, write=True) as db:
            key = (tenant, name)
            if not db.execute("DELETE FROM sources WHERE tenant = ? AND name = ?", key).rowcount:
                raise SourceError(f"no source named {name!r}")
            db.execute("DELETE FROM items WHERE tenant = ? AND source = ?", key)

    def items(self, config: SourceConfig) -> dict[str, ItemState]:
        with transaction(self._db, self._lock, write=False) as db:
            rows = db.execute(
                "SELECT path, doc_id, stamp, acl_digest FROM items WHERE tenant = ? AND source = ?",
                (config.tenant, config.name),
            ).fetchall()
        return {row[0]: ItemState(*row[1:]) for row in rows}

    def saw(self, config: SourceConfig, seen: list[tuple[str, ItemState]]) -> None:
        """Record what a sync saw of these items (path, state), in one transaction."""
        with transaction(self._db, self._lock, write=True) as db:
            db.executemany(
                "INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?, ?, ?)",
                [(config.tenant, config.name, path, *astuple(state)) for path, state in seen],
            )

    def forget(self, config: SourceConfig, path: str) -> None:
        with transaction(self._db, self._lock, write=True) as db:
            db.execute(
                "DELETE FROM items WHERE tenant = ? AND source = ? AND path = ?",
                (config.tenant, config.name, path),
            )

    def report(self, config: SourceConfig, report: dict[str, Any]) -> None:
        with transaction(self._db, self._lock, write=True) as db:
            db.execute(
                "UPDATE sources SET last_report = ? WHERE tenant = ? AND name = ?",
                (json.dumps(report), config.tenant, config.name),
            )

    def close(self) -> None:
        self._db.close()


def _web_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _migrate_files(db: sqlite3.Connection) -> None:
    """The items table; a registry written before websites were sources kept files with a
    modified time and a size, which become a folder item's stamp."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS items (
        tenant TEXT NOT NULL, source TEXT NOT NULL, path TEXT NOT NULL, doc_id TEXT NOT NULL,
        stamp TEXT NOT NULL, acl_digest TEXT NOT NULL, PRIMARY KEY (tenant, source, path))"""
    )
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'files'").fetchone():
        db.execute(
            "INSERT OR IGNORE INTO items SELECT tenant, source, path, doc_id,"
            " modified_ns || ':' || size, acl_digest FROM files"
        )
        db.execute("DROP TABLE files")
