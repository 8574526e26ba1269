"""The query history: each answer given (question, answer, citations, latency) with the
asker's feedback, per tenant, for the tenant's administrators; and its export as a QA dataset
(eval/dataset.py's format), so that `ragserve eval answers` runs on real traffic.

Askers are stored as a keyed hash (HMAC-SHA256 under a secret kept in the database) unless
history_identities is set: the hash still tells one asker's entries apart and lets an asker
rate their own answers, but a list of likely names cannot be hashed to find whose they are.
Entries older than the retention are deleted as new ones arrive.
"""

import hashlib
import hmac
import json
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ragserve.sqlite_db import connect, transaction

Rating = Literal["up", "down"]
MAX_PAGE = 1000


@dataclass
class HistoryEntry:
    id: str
    tenant: str
    # The asker's name, or its keyed hash.
    user: str
    at: float
    question: str
    # The conversation's earlier user turns, oldest first.
    history: list[str]
    answer: str
    mode: str
    refused: bool
    # {doc_id, title, quote} per citation.
    citations: list[dict[str, str]]
    latency_ms: float
    rating: Rating | None = None
    reason: str | None = None
    expected: str | None = None
    feedback_at: float | None = None
    seq: int = field(default=0, compare=False)

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "seq"}

    def as_qa(self) -> dict[str, Any] | None:
        """This entry as a QA record, when its feedback says what the right outcome was: a
        confirmed answer (its text, the first cited document as gold), an answer the asker
        corrected (`expected`, with the first cited document), or a confirmed refusal (an
        unanswerable question). None when there is no such label."""
        gold = self.citations[0]["title"] or self.citations[0]["doc_id"] if self.citations else None
        record: dict[str, Any] = {"qid": self.id, "question": self.question}
        if self.history:
            record |= {"type": "followup", "history": self.history}
        if self.rating == "up" and self.refused:
            return record | {"answers": [], "gold_doc": None, "kind": "unanswerable"}
        answer = self.answer if self.rating == "up" else self.expected
        if not answer or not gold:
            return None
        return record | {"answers": [answer], "gold_doc": gold, "kind": "answerable"}


class QueryHistory:
    def __init__(self, path: Path, retention_days: float, identities: bool) -> None:
        self.retention_s = retention_days * 86400
        self.identities = identities
        self._db = connect(path)
        self._lock = threading.Lock()
        self._db.executescript(
            """CREATE TABLE IF NOT EXISTS entries (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL UNIQUE,
                tenant TEXT NOT NULL,
                user TEXT NOT NULL,
                asker TEXT NOT NULL,
                at REAL NOT NULL,
                body TEXT NOT NULL
            );
            CREATE INDEX IF NOT EXISTS entries_by_tenant ON entries (tenant, seq);
            CREATE INDEX IF NOT EXISTS entries_by_age ON entries (at);
            CREATE TABLE IF NOT EXISTS secret (value TEXT NOT NULL);"""
        )
        with transaction(self._db, self._lock, write=True) as db:
            if db.execute("SELECT value FROM secret").fetchone() is None:
                db.execute("INSERT INTO secret VALUES (?)", (secrets.token_hex(32),))

    @property
    def enabled(self) -> bool:
        return self.retention_s > 0

    @staticmethod
    def _asker(db: sqlite3.Connection, tenant: str, user: str) -> str:
        # The secret is read each time: `ragserve restore` may replace it (with the entries
        # hashed under it) while the server runs.
        secret = bytes.fromhex(db.execute("SELECT value FROM secret").fetchone()[0])
        return hmac.new(secret, f"{tenant}\0{user}".encode(), hashlib.sha256).hexdigest()[:24]

    def record(self, entry: HistoryEntry, user: str) -> None:
        """Store an answer given to `user` (entry.user is set here), and drop expired ones."""
        if not self.enabled:
            return
        with transaction(self._db, self._lock, write=True) as db:
            asker = self._asker(db, entry.tenant, user)
            entry.user = user if self.identities else asker
            body = json.dumps(entry.as_json())
            db.execute(
                "INSERT INTO entries (id, tenant, user, asker, at, body) VALUES (?, ?, ?, ?, ?, ?)",
                (entry.id, entry.tenant, entry.user, asker, entry.at, body),
            )
            db.execute("DELETE FROM entries WHERE at < ?", (time.time() - self.retention_s,))

    def rate(
        self,
        tenant: str,
        user: str,
        entry_id: str,
        rating: Rating,
        reason: str | None,
        expected: str | None,
    ) -> HistoryEntry | None:
        """The asker's feedback on their own answer (a second rating replaces the first); None
        when there is no such answer of theirs."""
        with transaction(self._db, self._lock, write=True) as db:
            row = db.execute(
                "SELECT seq, body FROM entries WHERE id = ? AND tenant = ? AND asker = ?",
                (entry_id, tenant, self._asker(db, tenant, user)),
            ).fetchone()
            if row is None:
                return None
            entry = _entry(row)
            entry.rating, entry.reason, entry.expected = rating, reason, expected
            entry.feedback_at = time.time()
            db.execute(
                "UPDATE entries SET body = ? WHERE seq = ?", (json.dumps(entry.as_json()), row[0])
            )
        return entry

    def page(self, tenant: str, limit: int, before: str | None = None) -> list[HistoryEntry]:
        """The tenant's entries newest first: those recorded before the entry `before` (an id
        of the tenant's; none when it is not one, or has expired), at most limit."""
        bound = "(SELECT seq FROM entries WHERE id = ? AND tenant = ?)" if before else "?"
        with transaction(self._db, self._lock, write=False) as db:
            rows = db.execute(
                f"SELECT seq, body FROM entries WHERE tenant = ? AND seq < {bound}"
                " ORDER BY seq DESC LIMIT ?",
                (tenant, *((before, tenant) if before else (2**62,)), min(limit, MAX_PAGE)),
            ).fetchall()
        return [_entry(row) for row in rows]

    def all(self, tenant: str) -> list[HistoryEntry]:
        """Every entry of the tenant, oldest first (an export)."""
        with transaction(self._db, self._lock, write=False) as db:
            rows = db.execute(
                "SELECT seq, body FROM entries WHERE tenant = ? ORDER BY seq", (tenant,)
            ).fetchall()
        return [_entry(row) for row in rows]

    def close(self) -> None:
        self._db.close()


def _entry(row: sqlite3.Row | tuple[Any, ...]) -> HistoryEntry:
    entry = HistoryEntry(**json.loads(row[1]))
    entry.seq = row[0]
    return entry
