import sqlite3

import pytest

from ragserve.access import Role
from ragserve.keys import KeyStore, hash_key


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


def test_permission_key_separates_an_administrator_from_a_namesake_reader(tmp_path):
    # An admin key reads the whole tenant: sharing a key (and so cached answers) with a reader
    # of the same name and groups would hand the reader what only the admin may read. Reader
    # and writer read the same documents, so they may share.
    keys = KeyStore(tmp_path / "keys.sqlite")
    admin, reader, writer = (
        keys.authenticate(keys.create("a", ["g"], "t1", role)[0])
        for role in (Role.ADMIN, Role.READER, Role.WRITER)
    )
    assert admin.permission_key != reader.permission_key
    assert reader.permission_key == writer.permission_key


def test_key_changes_are_audited_per_tenant(tmp_path):
    from ragserve.audit import AuditAction

    keys = KeyStore(tmp_path / "keys.sqlite")
    _, record = keys.create("alice", ["staff"], "acme", Role.WRITER, actor="root")
    keys.create("bob", [], "globex")
    keys.revoke(record.key_id, actor="root")
    keys.revoke(record.key_id, actor="root")  # already revoked: nothing happens, nothing logged
    log = keys.audit_log("acme")
    assert [(e.action, e.actor, e.target) for e in log] == [
        (AuditAction.KEY_REVOKE, "root", str(record.key_id)),
        (AuditAction.KEY_CREATE, "root", str(record.key_id)),
    ]
    assert '"role": "writer"' in log[1].detail and "rsk-" in log[1].detail
    assert [e.tenant for e in keys.audit_log(None)] == ["acme", "globex", "acme"]


def test_a_restore_never_brings_a_revoked_key_back(tmp_path):
    from ragserve.sqlite_db import copy_database

    keys = KeyStore(tmp_path / "keys.sqlite")
    kept, kept_record = keys.create("alice", [], "acme")
    withdrawn, withdrawn_record = keys.create("mallory", [], "acme")
    copy_database(keys.path, tmp_path / "backup.sqlite")
    keys.revoke(withdrawn_record.key_id)
    later, _ = keys.create("carol", [], "acme")
    keys.restore_from(tmp_path / "backup.sqlite", actor="root")
    assert keys.authenticate(kept) is not None
    assert keys.authenticate(withdrawn) is None, "revoked after the backup: stays revoked"
    assert keys.authenticate(later) is None, "created after the backup: not in it"
    restores = [e for e in keys.audit_log("acme") if e.action == "store.restore"]
    assert len(restores) == 1 and '"active_keys": 1' in restores[0].detail
    assert kept_record.key_id in [r.key_id for r in keys.list()]
