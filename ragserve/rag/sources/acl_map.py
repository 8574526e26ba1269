"""Who may read a source's documents, by path: rules of path globs to grants, the first match
winning, and a default for paths no rule matches. Written as JSON:

    {"default": {"groups": ["staff"]},
     "rules": [{"path": "hr/*", "users": {"hana": "manage"}, "groups": ["hr"]}]}

(grants as in an upload's acl: names, read by default, or {name: read|write|manage}).
"""

import hashlib
import json
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from ragserve.rag.documents import Acl


class AclMapError(ValueError):
    pass


@dataclass(frozen=True)
class AclMap:
    default: Acl
    rules: tuple[tuple[str, Acl], ...] = ()

    def acl_for(self, path: str) -> Acl:
        return next((acl for glob, acl in self.rules if fnmatch(path, glob)), self.default)

    def to_json(self) -> dict[str, Any]:
        def grants(acl: Acl) -> dict[str, dict[str, str]]:
            return {
                "users": {name: level.label for name, level in acl.users},
                "groups": {name: level.label for name, level in acl.groups},
            }

        return {
            "default": grants(self.default),
            "rules": [{"path": glob} | grants(acl) for glob, acl in self.rules],
        }

    @classmethod
    def from_json(cls, value: Any) -> "AclMap":
        if not isinstance(value, dict) or set(value) - {"default", "rules"}:
            raise AclMapError('an ACL map is {"default": {...}, "rules": [...]}')
        rules = []
        for rule in value.get("rules") or []:
            if not isinstance(rule, dict) or not isinstance(rule.get("path"), str):
                raise AclMapError('each rule needs a "path" glob')
            rules.append((rule["path"], _acl(rule, {"path"})))
        return cls(_acl(value.get("default") or {}, set()), tuple(rules))

    @classmethod
    def load(cls, path: Path) -> "AclMap":
        try:
            return cls.from_json(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as error:
            raise AclMapError(f"cannot read the ACL map {path}: {error}") from error


def acl_digest(acl: Acl) -> str:
    """Tells two ACLs apart (a changed map re-permissions a document, nothing more)."""
    return hashlib.sha256(repr((acl.users, acl.groups)).encode()).hexdigest()[:16]


def _acl(value: dict[str, Any], extra: set[str]) -> Acl:
    if set(value) - {"users", "groups"} - extra:
        raise AclMapError(f"unknown keys in an ACL map entry: {sorted(set(value) - extra)}")
    try:
        return Acl.of(value.get("users"), value.get("groups"))
    except (ValueError, TypeError, AttributeError) as error:
        raise AclMapError(f"bad grants in an ACL map entry: {error}") from error
