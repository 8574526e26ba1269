import sqlite3

import pytest

from ragserve.access import Role
from ragserve.server.auth import KeyStore, hash_key


def test_keys_authenticate_until_revoked_and_only_their_hash_is_stored(tmp_path):
    keys = KeyStore(tmp_path / "keys.sqlite")
    key, record = keys.create("alice", ["staff", "eng"], "acme", Role.WRITER)
    principal = keys.authenticate(key)
    assert principal is not None
    assert (principal.user, principal.tenant, principal.role) == ("alice", "acme", Role.WRITER)
    assert principal.groups == {"staff", "eng"}
    assert keys.authenticate(key + "x") is None
    stored = sqlite3.connect(tmp_path / "keys.sqlite").execute("SELECT * FROM api_keys").fetchall()
    assert key not in str(stored) and hash_key(key) in str(stored)
    assert keys.revoke(record.key_id) and not keys.revoke(record.key_id)
    assert keys.authenticate(key) is None


@pytest.mark.parametrize("user", ["", "alice~x", "a b", "x" * 65, "ali/ce"])
def test_user_names_keep_to_a_safe_set(tmp_path, user):
    with pytest.raises(ValueError):
        KeyStore(tmp_path / "keys.sqlite").create(user, [])


def test_permission_key_separates_tenants_users_and_groups(tmp_path):
    keys = KeyStore(tmp_path / "keys.sqlite")
    principals = [
        keys.authenticate(keys.create(user, groups, tenant)[0])
        for user, groups, tenant in [
            ("a", ["g"], "t1"),
            ("a", ["g"], "t2"),
            ("a", ["h"], "t1"),
            ("b", ["g"], "t1"),
        ]
    ]
    assert len({p.permission_key for p in principals}) == 4
