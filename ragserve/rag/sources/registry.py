"""The sources a data folder follows, and what each sync last saw of each file, in
`data_dir/sources.sqlite`.

What a file was at its last sync (modified time, size, the ACL digest it got) only saves work:
the store stays the truth of what is indexed. A sync that dies between writing a document and
recording it here reads the file again next time; a document whose record was never written
is found by its id's source prefix.
"""

import json
import re
import threading
from dataclasses import asdict, astuple, dataclass, field
from pathlib import Path
from typing import Any

from ragserve.rag.sources.acl_map import AclMap
from ragserve.sqlite_db import connect, transaction

SOURCE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


class SourceError(ValueError):
    pass


@dataclass
class SourceConfig:
    name: str
    folder: str
    tenant: str = "default"
    owner: str = "admin"
    acl_map: dict[str, Any] = field(default_factory=lambda: AclMap.from_json({}).to_json())
    include: list[str] = field(default_factory=lambda: ["*"])
    exclude: list[str] = field(default_factory=list)
    # Seconds between syncs when the server runs them; None: only on request.
    every_s: float | None = None

    def __post_init__(self) -> None:
        if not SOURCE_NAME.fullmatch(self.name):
            raise SourceError(
                f"a source name is 1-64 letters, digits, '.', '_' or '-': {self.name!r}"
            )

    @property
    def doc_id_prefix(self) -> str:
        return f"source:{self.name}:"


@dataclass(frozen=True)
class FileState:
    doc_id: str
    modified_ns: int
    size: int
    acl_digest: str


class SourceRegistry:
    def __init__(self, path: Path) -> None:
        self._db = connect(path)
        self._lock = threading.Lock()
        self._db.executescript(
            """CREATE TABLE IF NOT EXISTS sources (
                tenant TEXT NOT NULL, name TEXT NOT NULL, config TEXT NOT NULL,
                last_report TEXT, PRIMARY KEY (tenant, name));
            CREATE TABLE IF NOT EXISTS files (
                tenant TEXT NOT NULL, source TEXT NOT NULL, path TEXT NOT NULL,
                doc_id TEXT NOT NULL, modified_ns INTEGER NOT NULL, size INTEGER NOT NULL,
                acl_digest TEXT NOT NULL, PRIMARY KEY (tenant, source, path));"""
        )

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
        """Change a source's settings (its ACL map, globs, interval); what its files were at
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

    def remove(self, tenant: str, name: str) -> None:
        with transaction(self._db, self._lock, write=True) as db:
            key = (tenant, name)
            if not db.execute("DELETE FROM sources WHERE tenant = ? AND name = ?", key).rowcount:
                raise SourceError(f"no source named {name!r}")
            db.execute("DELETE FROM files WHERE tenant = ? AND source = ?", key)

    def files(self, config: SourceConfig) -> dict[str, FileState]:
        with transaction(self._db, self._lock, write=False) as db:
            rows = db.execute(
                "SELECT path, doc_id, modified_ns, size, acl_digest FROM files"
                " WHERE tenant = ? AND source = ?",
                (config.tenant, config.name),
            ).fetchall()
        return {row[0]: FileState(*row[1:]) for row in rows}

    def saw(self, config: SourceConfig, path: str, state: FileState) -> None:
        with transaction(self._db, self._lock, write=True) as db:
            db.execute(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?)",
                (config.tenant, config.name, path, *astuple(state)),
            )

    def forget(self, config: SourceConfig, path: str) -> None:
        with transaction(self._db, self._lock, write=True) as db:
            db.execute(
                "DELETE FROM files WHERE tenant = ? AND source = ? AND path = ?",
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
