"""The audit trail: who changed which document, access rule or key, and when.

Each database that holds a kind of record keeps its own append-only audit table and writes the
entry in the same transaction as the change it records (the document store for documents and
ACLs, the key store for keys), so an entry exists if and only if its change was committed.
Readers merge the tables by time (merge_audit).
"""

import heapq
import json
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

# What one read returns at most; older entries are reached by paging with `before`.
MAX_AUDIT_PAGE = 1000


class AuditAction(StrEnum):
    DOCUMENT_WRITE = "document.write"  # a new document or a new version of one
    DOCUMENT_DELETE = "document.delete"
    ACL_CHANGE = "document.acl"
    KEY_CREATE = "key.create"
    KEY_REVOKE = "key.revoke"
    RESTORE = "store.restore"


@dataclass(frozen=True)
class AuditEntry:
    at: float  # seconds since the epoch, taken inside the recording transaction
    tenant: str
    actor: str  # the user the change was made as
    action: AuditAction
    target: str  # a document id, or a key id
    version: int | None = None  # the document's version after a write, before a delete
    detail: str = "{}"  # JSON: what changed (source and chunks, ACLs, the key's user and role)

    @classmethod
    def of(
        cls,
        tenant: str,
        actor: str,
        action: AuditAction,
        target: str,
        at: float,
        version: int | None = None,
        **detail: Any,
    ) -> "AuditEntry":
        return cls(at, tenant, actor, action, target, version, json.dumps(detail, sort_keys=True))

    def row(self) -> tuple[Any, ...]:
        """The entry's columns in AUDIT_COLUMNS order."""
        return (
            self.at,
            self.tenant,
            self.actor,
            self.action.value,
            self.target,
            self.version,
            self.detail,
        )

    @classmethod
    def from_row(cls, row: Iterable[Any]) -> "AuditEntry":
        at, tenant, actor, action, target, version, detail = row
        return cls(float(at), tenant, actor, AuditAction(action), target, version, detail)

    def as_json(self) -> dict[str, Any]:
        return asdict(self) | {"action": self.action.value, "detail": json.loads(self.detail)}


AUDIT_COLUMNS = ("at", "tenant", "actor", "action", "target", "version", "detail")

# The audit table of the SQLite databases (the embedded store and the key store).
SQLITE_AUDIT_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY, at REAL NOT NULL, tenant TEXT NOT NULL, actor TEXT NOT NULL,
    action TEXT NOT NULL, target TEXT NOT NULL, version INTEGER, detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_tenant ON audit (tenant, at);
"""


def append_sqlite(db: sqlite3.Connection, entry: AuditEntry) -> None:
    """Inside the caller's transaction."""
    db.execute(
        f"INSERT INTO audit ({', '.join(AUDIT_COLUMNS)})"
        f" VALUES ({', '.join('?' for _ in AUDIT_COLUMNS)})",
        entry.row(),
    )


def read_sqlite(
    db: sqlite3.Connection, tenant: str | None, before: float | None, limit: int
) -> list[AuditEntry]:
    rows = db.execute(
        f"SELECT {', '.join(AUDIT_COLUMNS)} FROM audit"
        " WHERE (:tenant IS NULL OR tenant = :tenant) AND (:before IS NULL OR at < :before)"
        " ORDER BY at DESC, seq DESC LIMIT :limit",
        {"tenant": tenant, "before": before, "limit": check_page(limit)},
    ).fetchall()
    return [AuditEntry.from_row(row) for row in rows]


def check_page(limit: int) -> int:
    if not 1 <= limit <= MAX_AUDIT_PAGE:
        raise ValueError(f"limit must be within [1, {MAX_AUDIT_PAGE}], not {limit}")
    return limit


def merge_audit(*logs: list[AuditEntry], limit: int) -> list[AuditEntry]:
    """Newest first, from logs that are each newest first."""
    merged = heapq.merge(*logs, key=lambda entry: -entry.at)
    return list(merged)[:limit]


def sqlite_audit_rows(db: sqlite3.Connection) -> set[tuple[Any, ...]]:
    return set(db.execute(f"SELECT {', '.join(AUDIT_COLUMNS)} FROM audit"))


def append_restores(
    db: sqlite3.Connection,
    actor: str,
    backup: str,
    counts: dict[str, int],
    counted: str,
    live_rows: set[tuple[Any, ...]],
) -> None:
    """Record a restore in the restored database: first the live trail's entries the backup
    lacks (what happened after it was taken: a restore rolls the data back, never the trail),
    then one entry per tenant (counts: what the backup holds per tenant, zero for tenants it
    does not hold), so every tenant's administrators learn of it."""
    for row in sorted(live_rows - sqlite_audit_rows(db)):
        append_sqlite(db, AuditEntry.from_row(row))
    now = time.time()
    for tenant, count in sorted(counts.items()):
        append_sqlite(
            db, AuditEntry.of(tenant, actor, AuditAction.RESTORE, backup, now, **{counted: count})
        )
