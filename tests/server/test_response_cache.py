import pytest

from ragserve.server import response_cache
from ragserve.server.response_cache import ResponseCache, cache_key


def test_keys_depend_on_every_part_but_not_on_order():
    base = {"permissions": "p", "index": "v1", "request": {"a": 1, "b": 2}}
    assert cache_key(base) == cache_key(
        {"request": {"b": 2, "a": 1}, "index": "v1", "permissions": "p"}
    )
    assert cache_key(base) != cache_key({**base, "index": "v2"})
    assert cache_key(base) != cache_key({**base, "permissions": "q"})


def test_entries_expire_and_the_least_recently_used_goes_first(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(response_cache.time, "monotonic", lambda: now[0])
    cache = ResponseCache(ttl_s=10, max_entries=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and len(cache) == 2
    now[0] = 10.5
    assert cache.get("a") is None and cache.get("c") is None


@pytest.mark.parametrize("max_entries", [1, 3])
def test_size_never_exceeds_the_bound(max_entries):
    cache = ResponseCache(ttl_s=60, max_entries=max_entries)
    for i in range(10):
        cache.put(str(i), i)
    assert len(cache) == max_entries
