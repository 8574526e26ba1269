"""`ragserve keys`: create, list and revoke API keys."""

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ragserve.access import Role
from ragserve.cli.common import console
from ragserve.cli.options import ConfigOption, DataDirOption, JsonOption
from ragserve.keys import KeyStore

keys_app = typer.Typer(no_args_is_help=True, help="API keys: create, list, revoke.")


def _key_store(data_dir: Path | None, config: Path | None) -> KeyStore:
    from ragserve.settings import Settings

    settings = Settings.load(config, data_dir=data_dir)
    return KeyStore(settings.keys_path)


@keys_app.command("create")
def keys_create(
    user: Annotated[str, typer.Option(help="The user this key acts as.")],
    group: Annotated[list[str] | None, typer.Option(help="A group; repeatable.")] = None,
    tenant: str = "default",
    role: Annotated[str, typer.Option(help="reader, writer or admin.")] = "reader",
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create an API key; it is printed once and stored only as a hash."""
    try:
        role_ = Role(role)
    except ValueError as error:
        console.print(f"[red]error:[/red] role must be reader, writer or admin, not {role!r}")
        raise typer.Exit(2) from error
    key, record = _key_store(data_dir, config).create(user, group or [], tenant, role_)
    if as_json:
        print(json.dumps({"key": key, **asdict(record)}))
    else:
        console.print(f"key id {record.key_id} for {user} ({role_.value}, tenant {tenant}):")
        print(key)


@keys_app.command("list")
def keys_list(
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """List keys (their prefixes, never the keys)."""
    records = _key_store(data_dir, config).list()
    if as_json:
        print(json.dumps([asdict(r) for r in records]))
        return
    table = Table("id", "prefix", "user", "groups", "tenant", "role", "revoked")
    for r in records:
        table.add_row(
            str(r.key_id),
            r.prefix,
            r.user,
            ",".join(r.groups),
            r.tenant,
            r.role,
            "yes" if r.revoked_at else "",
        )
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(
    key_id: int,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Revoke a key by id; it stops working on the next request."""
    revoked = _key_store(data_dir, config).revoke(key_id)
    if as_json:
        print(json.dumps({"key_id": key_id, "revoked": revoked}))
    elif revoked:
        console.print(f"revoked key {key_id}")
    if not revoked:
        if not as_json:
            console.print(f"[red]error:[/red] no active key with id {key_id}")
        raise typer.Exit(1)
