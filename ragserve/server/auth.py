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
from dataclasses import dataclass
from pathlib import Path

from ragserve.access import Principal, Role

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
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute(
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
            )"""
        )

    def create(
        self, user: str, groups: list[str], tenant: str = "default", role: Role = Role.READER
    ) -> tuple[str, KeyRecord]:
        if not user or not tenant:
            raise ValueError("a key needs a user and a tenant")
        if not USER_NAME.fullmatch(user):
            # User names prefix document ids ("<user>~<id>"), so they keep to a URL-safe set.
            raise ValueError(f"user name {user!r}: use letters, digits and . _ @ - (64 at most)")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        now = time.time()
        with self._lock:
            cursor = self._db.execute(
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
        record = KeyRecord(
            cursor.lastrowid, key[:10], user, sorted(groups), tenant, role.value, now, None
        )
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

    def list(self) -> list[KeyRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, prefix, user, groups, tenant, role, created_at, revoked_at"
                " FROM api_keys ORDER BY id"
            ).fetchall()
        return [KeyRecord(r[0], r[1], r[2], json.loads(r[3]), *r[4:]) for r in rows]

    def revoke(self, key_id: int) -> bool:
        with self._lock:
            cursor = self._db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (time.time(), key_id),
            )
        return cursor.rowcount == 1
