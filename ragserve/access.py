"""Who is asking: the principal an API key stands for, and the store filter it gets.

The server authenticates keys into principals; the CLI and evaluation act as principals too.
access_for is the only place a principal becomes an AccessFilter, so what a caller may read is
decided here and nowhere else (never from a request body).
"""

import dataclasses
import json
from dataclasses import dataclass
from enum import StrEnum

from ragserve.rag.documents import AccessFilter


class Role(StrEnum):
    READER = "reader"
    WRITER = "writer"
    ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    user: str
    groups: frozenset[str]
    tenant: str
    role: Role
    key_id: int

    @property
    def permission_key(self) -> str:
        """Everything that decides what this principal may read, as one string: every field of
        its store filter (tenant, user, groups, and whether its role reads the whole tenant).
        Built from access_for itself, so that whatever comes to decide a read keys the response
        cache too: two keys share an entry only when the store would show them the same."""
        return json.dumps(dataclasses.asdict(access_for(self)), sort_keys=True)

    @property
    def account(self) -> str:
        """Whom per-user limits and fair scheduling count as one: the user within its tenant.
        The same name in another tenant is someone else."""
        return json.dumps([self.tenant, self.user])

    def can_write(self) -> bool:
        return self.role in (Role.WRITER, Role.ADMIN)


def access_for(principal: Principal) -> AccessFilter:
    """The only way the server builds a store filter: from the authenticated principal."""
    return AccessFilter(
        tenant=principal.tenant,
        user=principal.user,
        groups=tuple(sorted(principal.groups)),
        everything=principal.role is Role.ADMIN,
    )
