"""Operator commands on a data folder: the audit trail, and online backup and restore."""

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ragserve.cli.common import app, console
from ragserve.cli.options import ConfigOption, DataDirOption, JsonOption, StoreOption
from ragserve.settings import Settings

INDEX_FILE = "index.sqlite"
KEYS_FILE = "keys.sqlite"


def _settings(data_dir: Path | None, config: Path | None, store: str | None) -> Settings:
    return Settings.load(config, data_dir=data_dir, store=store)


def _embedded_store(settings: Settings) -> Path | None:
    """The embedded store's file, or None when the documents live in PostgreSQL."""
    url = settings.store_url
    if url.startswith(("postgresql://", "postgres://")):
        return None
    return Path(url.removeprefix("sqlite:///").removeprefix("sqlite://"))


@app.command()
def audit(
    tenant: Annotated[str | None, typer.Option(help="One tenant (default: all).")] = None,
    limit: Annotated[int, typer.Option(help="Newest entries shown (at most 1000).")] = 100,
    before: Annotated[
        float | None, typer.Option(help="Only entries older than this (epoch seconds).")
    ] = None,
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """The audit trail: document writes, deletes, ACL changes, key changes and restores."""
    from ragserve.audit import MAX_AUDIT_PAGE, merge_audit
    from ragserve.keys import KeyStore
    from ragserve.services import DocumentIndex

    if not 1 <= limit <= MAX_AUDIT_PAGE:
        raise typer.BadParameter(f"--limit must be within [1, {MAX_AUDIT_PAGE}]")
    settings = _settings(data_dir, config, store)
    index = DocumentIndex.open(settings).store
    documents = index.audit_log(tenant, limit, before)
    index.close()
    keys = KeyStore(settings.data_dir / KEYS_FILE).audit_log(tenant, limit, before)
    entries = merge_audit(documents, keys, limit=limit)
    if as_json:
        print(json.dumps([entry.as_json() for entry in entries]))
        return
    table = Table("when (UTC)", "tenant", "actor", "action", "target", "version", "detail")
    for entry in entries:
        table.add_row(
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(entry.at)),
            entry.tenant,
            entry.actor,
            entry.action.value,
            entry.target,
            "" if entry.version is None else str(entry.version),
            entry.detail,
        )
    console.print(table)


@app.command()
def backup(
    target: Annotated[Path, typer.Argument(help="A new folder for the backup.")],
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Back up the keys and the embedded store while the server runs (SQLite online backup);
    a PostgreSQL store is backed up with pg_dump instead."""
    from ragserve.sqlite_db import check_integrity, copy_database

    settings = _settings(data_dir, config, store)
    if target.exists() and any(target.iterdir()):
        console.print(f"[red]error:[/red] {target} is not empty; back up into a new folder")
        raise typer.Exit(2)
    target.mkdir(parents=True, exist_ok=True)
    embedded = _embedded_store(settings)
    sources = {KEYS_FILE: settings.data_dir / KEYS_FILE}
    if embedded is not None:
        sources[INDEX_FILE] = embedded
    copied = {}
    for name, source in sources.items():
        if not source.exists():
            continue
        copy_database(source, target / name)
        check_integrity(target / name)
        copied[name] = str(source)
    manifest = {"created_at": time.time(), "files": copied, "index_in_postgresql": not embedded}
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2))
    if as_json:
        print(json.dumps({"backup": str(target), **manifest}))
        return
    for name, source in copied.items():
        console.print(f"{source} -> {target / name}")
    if embedded is None:
        console.print("the documents are in PostgreSQL: back them up with pg_dump")


@app.command()
def restore(
    source: Annotated[Path, typer.Argument(help="A folder made by `ragserve backup`.")],
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Restore keys and the embedded store from a backup, also while the server runs: its
    next request sees the restored documents. Keys revoked since the backup stay revoked."""
    from ragserve.keys import KeyStore
    from ragserve.rag.stores.sqlite import SqliteStore
    from ragserve.services import DocumentIndex

    settings = _settings(data_dir, config, store)
    found = [name for name in (INDEX_FILE, KEYS_FILE) if (source / name).is_file()]
    if not found:
        console.print(f"[red]error:[/red] {source} holds no {INDEX_FILE} or {KEYS_FILE}")
        raise typer.Exit(2)
    restored = []
    try:
        if INDEX_FILE in found:
            index = DocumentIndex.open(settings).store
            if not isinstance(index, SqliteStore):
                console.print("[red]error:[/red] the store is PostgreSQL: restore it with psql")
                raise typer.Exit(2)
            index.restore_from(source / INDEX_FILE, actor="operator")
            index.close()
            restored.append(str(index.path))
        if KEYS_FILE in found:
            keys = KeyStore(settings.data_dir / KEYS_FILE)
            keys.restore_from(source / KEYS_FILE, actor="operator")
            restored.append(str(keys.path))
    except ValueError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(1) from error
    if as_json:
        print(json.dumps({"restored": restored, "from": str(source)}))
    else:
        for path in restored:
            console.print(f"restored {path}")
