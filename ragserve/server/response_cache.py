"""A cache of whole responses to deterministic requests.

The key covers everything that could change the answer or who may see it: the principal's
permission set (its whole store filter), the model and its weights, the chat template, the full
request with its sampling parameters and, for answers from documents, the version of what that
principal may read (Store.visible_version). A write, delete or ACL change that touches what the
principal reads moves that version, so entries made before it can no longer be reached; one the
principal cannot see leaves them, so a cache hit or miss says nothing about hidden documents.
"""

import hashlib
import json
import threading
import time
from collections import OrderedDict
from typing import Any


def cache_key(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class ResponseCache:
    def __init__(self, ttl_s: float, max_entries: int) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            stored_at, value = entry
            if time.monotonic() - stored_at > self.ttl_s:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return value

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._entries[key] = (time.monotonic(), value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
