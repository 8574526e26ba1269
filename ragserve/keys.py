"""API keys and the principals they stand for.

A key is shown once at creation; only its SHA-256 is stored (keys are 256-bit random strings,
so a fast hash is enough: there is nothing to brute-force). Revocation is checked on every
request, so a revoked key stops working on the next one.
"""

import hashlib
import json
import re
import secrets
import sqlite3
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ragserve.access import Principal, Role
from ragserve.audit import (
    SQLITE_AUDIT_SCHEMA,
    AuditAction,
    AuditEntry,
    append_restores,
    append_sqlite,
    read_sqlite,
    sqlite_audit_rows,
)
from ragserve.sqlite_db import connect, restore_database, transaction

KEY_PREFIX = "rsk-"
USER_NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")


@dataclass(frozen=True)
class KeyRecord:
    key_id: int
    prefix: str
    user: str
    groups: list[str]
    tenant: str
    role: str
    created_at: float
    revoked_at: float | None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyStore:
    """Keys in one SQLite file, with the audit trail of their creation and revocation."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = connect(path)
        self._lock = threading.Lock()
        self._db.executescript(
            """CREATE TABLE IF NOT EXISTS api_keys (
                id INTEGER PRIMARY KEY,
                key_hash TEXT NOT NULL UNIQUE,
                prefix TEXT NOT NULL,
                user TEXT NOT NULL,
                groups TEXT NOT NULL,
                tenant TEXT NOT NULL,
                role TEXT NOT NULL,
                created_at REAL NOT NULL,
                revoked_at REAL
            );"""
            + SQLITE_AUDIT_SCHEMA
        )

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self._db, self._lock, write=True)

    def create(
        self,
        user: str,
        groups: list[str],
        tenant: str = "default",
        role: Role = Role.READER,
        actor: str = "operator",
    ) -> tuple[str, KeyRecord]:
        """A new key and its record; the audit trail names actor as its creator."""
        if not user or not tenant:
            raise ValueError("a key needs a user and a tenant")
        if not USER_NAME.fullmatch(user):
            # User names prefix document ids ("<user>~<id>"), so they keep to a URL-safe set.
            raise ValueError(f"user name {user!r}: use letters, digits and . _ @ - (64 at most)")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        now = time.time()
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO api_keys (key_hash, prefix, user, groups, tenant, role, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    hash_key(key),
                    key[:10],
                    user,
                    json.dumps(sorted(groups)),
                    tenant,
                    role.value,
                    now,
                ),
            )
            key_id = cursor.lastrowid
            assert key_id is not None
            audit = AuditEntry.of(
                tenant,
                actor,
                AuditAction.KEY_CREATE,
                str(key_id),
                now,
                user=user,
                groups=sorted(groups),
                role=role.value,
                prefix=key[:10],
            )
            append_sqlite(db, audit)
        record = KeyRecord(key_id, key[:10], user, sorted(groups), tenant, role.value, now, None)
        return key, record

    def authenticate(self, key: str) -> Principal | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, user, groups, tenant, role FROM api_keys"
                " WHERE key_hash = ? AND revoked_at IS NULL",
                (hash_key(key),),
            ).fetchone()
        if row is None:
            return None
        key_id, user, groups, tenant, role = row
        return Principal(user, frozenset(json.loads(groups)), tenant, Role(role), key_id)

    def restore_from(self, backup: Path, actor: str = "operator") -> None:
        """Replace the keys with a backup's while the server may be using them (see
        restore_database). A key revoked here stays revoked even if the backup predates its
        revocation: a restore must never bring a withdrawn credential back. Each tenant's audit
        trail records the restore and keeps what it recorded since the backup."""
        with self._lock:
            revoked = self._db.execute(
                "SELECT key_hash, revoked_at FROM api_keys WHERE revoked_at IS NOT NULL"
            ).fetchall()
            tenants = {row[0] for row in self._db.execute("SELECT tenant FROM api_keys")}
            trail = sqlite_audit_rows(self._db)

        def prepare(staged: Path) -> None:
            restored = KeyStore(staged)  # adds what an older key store lacks
            try:
                with restored._transaction() as db:
                    db.executemany(
                        "UPDATE api_keys SET revoked_at = ? WHERE key_hash = ?"
                        " AND revoked_at IS NULL",
                        [(at, key_hash) for key_hash, at in revoked],
                    )
                    counts = dict(
                        db.execute(
                            "SELECT tenant, COUNT(*) FROM api_keys WHERE revoked_at IS NULL"
                            " GROUP BY tenant"
                        )
                    )
                    counts = dict.fromkeys(tenants, 0) | counts
                    append_restores(db, actor, str(backup), counts, "active_keys", trail)
            finally:
                restored._db.close()

        restore_database(backup, self.path, prepare)

    def audit_log(
        self, tenant: str | None, limit: int = 100, before: float | None = None
    ) -> list[AuditEntry]:
        """Key creations and revocations, newest first (see Store.audit_log)."""
        with self._lock:
            return read_sqlite(self._db, tenant, before, limit)

    def list(self) -> list[KeyRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, prefix, user, groups, tenant, role, created_at, revoked_at"
                " FROM api_keys ORDER BY id"
            ).fetchall()
        return [KeyRecord(r[0], r[1], r[2], json.loads(r[3]), *r[4:]) for r in rows]

    def revoke(self, key_id: int, actor: str = "operator") -> bool:
        """Revoke an active key; the audit trail names actor as the one who did."""
        now = time.time()
        with self._transaction() as db:
            row = db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
                " RETURNING user, tenant",
                (now, key_id),
            ).fetchone()
            if row is not None:
                user, tenant = row
                audit = AuditEntry.of(
                    tenant, actor, AuditAction.KEY_REVOKE, str(key_id), now, user=user
                )
                append_sqlite(db, audit)
        return row is not None
