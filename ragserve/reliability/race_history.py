"""The history of a race run (every request with its start and completion time and its result)
and the check of every read in it against the writes around it.

Each write takes effect at some instant between its start and its completion, in an order the
client cannot see when two of them overlap. A read returns what held at some instant of its own
span (the server may read at several instants, e.g. one per search). A returned piece of text is
a violation only when no order of the writes consistent with their times lets it be current and
permitted at any instant of the read:

- a component (the document's text being that revision; the reader being admitted by its ACL)
  is *blocked* for a read when some write that set it wrong completed before the read started
  (`bad.end < read.start`) and no write that sets it right could fall after that one and before
  the read ended (`good.start <= read.end and good.end >= bad.start`), or when no write that
  sets it right started before the read ended (the state before any write: no document);
- writes refused with a 4xx changed nothing and are ignored; a write that got a 5xx or no
  answer may have taken effect, so it counts as one that sets a component right (at any time
  after its start when no answer came), never as one that sets it wrong.

The check is sound (a linearizable server never produces a violation) and checks the text and
the permission separately, so it can miss a read that needed both at instants that never met.
"""

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# Every sentence of a race document carries "rm<document number>x<revision>".
MARKER = re.compile(r"\brm(\d+)x(\d+)\b")
WRITES_TEXT = ("create", "reingest")
WRITES = (*WRITES_TEXT, "delete", "acl")
READS = ("search", "answer")
# The statuses each operation may legitimately get: a write aimed at a document that another
# writer deleted meanwhile is a 404, or a 409 when the delete landed while it was embedded.
EXPECTED = {
    "create": {201},
    "reingest": {201, 404, 409},
    "delete": {200, 404},
    "acl": {200, 404},
    "search": {200},
    "answer": {200},
}
INTERNAL_ERROR = re.compile(
    r"database is locked|internal server error|internal error|traceback", re.IGNORECASE
)


def marker(number: int, revision: int) -> str:
    return f"rm{number}x{revision}"


class Outcome(StrEnum):
    APPLIED = "applied"  # 2xx
    REJECTED = "rejected"  # 4xx: nothing changed
    UNKNOWN = "unknown"  # 5xx or no response: it may have taken effect


@dataclass(frozen=True)
class Hit:
    """A piece of document text a read returned: the document and revision its marker names,
    and the document id the server attached to it (None for the answer text itself)."""

    doc: str
    revision: int
    source: str  # "chunk", "citation" or "answer"
    claimed: str | None = None


@dataclass
class Operation:
    kind: str  # one of WRITES or READS
    actor: str  # the key's name
    start: float  # monotonic seconds, just before the request went out
    end: float = math.inf  # just after its response was read; inf when none came
    status: int = 0  # HTTP status, 0 when no response came
    doc: str | None = None  # the document a write targets
    revision: int | None = None  # the revision a create or re-ingest writes
    groups: frozenset[str] | None = None  # the reader groups a create or ACL change admits
    hits: list[Hit] = field(default_factory=list)
    error: str | None = None  # the response body or transport error, when not a success

    @property
    def outcome(self) -> Outcome:
        if 200 <= self.status < 300:
            return Outcome.APPLIED
        if 400 <= self.status < 500:
            return Outcome.REJECTED
        return Outcome.UNKNOWN

    @property
    def internal_error(self) -> bool:
        return bool(self.error and INTERNAL_ERROR.search(self.error))

    @property
    def unexpected(self) -> bool:
        """A status this operation never gets from a correct server (5xx and none included)."""
        return self.status not in EXPECTED[self.kind]

    @property
    def failed(self) -> bool:
        return self.unexpected or self.internal_error


@dataclass(frozen=True)
class ReaderScope:
    """What decides whether a reader may read a document: its groups, and whether it is in
    the writers' tenant at all (readers never own documents, nor are named as users)."""

    groups: frozenset[str]
    same_tenant: bool = True

    def admitted(self, granted: frozenset[str]) -> bool:
        return self.same_tenant and bool(self.groups & granted)


@dataclass
class Violation:
    kind: str  # deleted, stale, forbidden, never written, misattributed
    read: Operation
    hit: Hit
    blocker: Operation | None  # the write that blocked it; None for the state before any

    def as_json(self, zero: float) -> dict[str, Any]:
        def span(op: Operation) -> list[float]:
            return [round(op.start - zero, 4), round(op.end - zero, 4)]

        found = {
            "kind": self.kind,
            "reader": self.read.actor,
            "read": self.read.kind,
            "read_span_s": span(self.read),
            "doc": self.hit.doc,
            "revision": self.hit.revision,
            "source": self.hit.source,
            "claimed_doc": self.hit.claimed,
        }
        if self.blocker is not None:
            found["blocker"] = {
                "kind": self.blocker.kind,
                "actor": self.blocker.actor,
                "span_s": span(self.blocker),
                "revision": self.blocker.revision,
                "groups": sorted(self.blocker.groups or ()),
            }
        return found


def hits_in(text: str, numbers: dict[int, str], source: str, claimed: str | None) -> list[Hit]:
    """The distinct markers in a returned text as hits; a number no document was given keeps a
    name of its own, so the check reports it instead of skipping it."""
    return [
        Hit(numbers.get(int(n), f"unknown#{n}"), int(r), source, claimed)
        for n, r in dict.fromkeys(MARKER.findall(text))
    ]


def _blocker(
    bad: list[Operation], good: list[Operation], read: Operation
) -> tuple[bool, Operation | None]:
    """Whether the component is blocked throughout the read, and by which write (None: by the
    state before any write)."""
    possible = [g.end for g in good if g.start <= read.end]
    if not possible:
        return True, None
    latest_good = max(possible)
    blockers = [b for b in bad if b.end < read.start and b.start > latest_good]
    if blockers:
        return True, max(blockers, key=lambda b: b.end)
    return False, None


def check_hit(
    read: Operation, hit: Hit, scope: ReaderScope, writes: list[Operation]
) -> Violation | None:
    if hit.claimed is not None and hit.claimed != hit.doc:
        return Violation("misattributed", read, hit, None)
    applied = [w for w in writes if w.outcome is Outcome.APPLIED]
    # The text: current from its own write on, until another revision or a delete.
    text_bad = [
        w
        for w in applied
        if w.kind == "delete" or (w.kind in WRITES_TEXT and w.revision != hit.revision)
    ]
    text_good = [w for w in writes if w.kind in WRITES_TEXT and w.revision == hit.revision]
    blocked, blocker = _blocker(text_bad, text_good, read)
    if blocked:
        if blocker is None:
            return Violation("never written", read, hit, None)
        return Violation("deleted" if blocker.kind == "delete" else "stale", read, hit, blocker)
    # The permission: set by a create's ACL or an ACL change, gone with a delete (a re-ingest
    # that recreates a deleted document gives it its owner alone).
    perm_bad = [
        w
        for w in applied
        if w.kind == "delete" or (w.groups is not None and not scope.admitted(w.groups))
    ]
    perm_good = [w for w in writes if w.groups is not None and scope.admitted(w.groups)]
    blocked, blocker = _blocker(perm_bad, perm_good, read)
    if blocked:
        return Violation("forbidden", read, hit, blocker)
    return None


def check(history: list[Operation], scopes: dict[str, ReaderScope]) -> list[Violation]:
    """Every violation among the successful reads of the history."""
    writes: dict[str, list[Operation]] = defaultdict(list)
    for op in history:
        if op.kind in WRITES and op.doc is not None and op.outcome is not Outcome.REJECTED:
            writes[op.doc].append(op)
    found = []
    for read in history:
        if read.kind not in READS or read.outcome is not Outcome.APPLIED:
            continue
        for hit in read.hits:
            violation = check_hit(read, hit, scopes[read.actor], writes.get(hit.doc, []))
            if violation is not None:
                found.append(violation)
    return found
