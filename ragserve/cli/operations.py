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

# The embedded store's name in a backup (its live file is wherever --store says).
INDEX_FILE = "index.sqlite"


def _settings(data_dir: Path | None, config: Path | None, store: str | None) -> Settings:
    return Settings.load(config, data_dir=data_dir, store=store)


def _embedded_store(settings: Settings) -> Path | None:
    """The embedded store's file, or None when the documents live in PostgreSQL."""
    url = settings.store_url
    if url.startswith(("postgresql://", "postgres://")):
        return None
    return Path(url.removeprefix("sqlite:///").removeprefix("sqlite://"))


def _databases(settings: Settings) -> dict[str, Path]:
    """The data folder's databases by their name in a backup: keys, sources, query history,
    and the embedded store unless the documents live in PostgreSQL."""
    paths = (settings.keys_path, settings.sources_path, settings.history_path)
    databases = {path.name: path for path in paths}
    if (embedded := _embedded_store(settings)) is not None:
        databases[INDEX_FILE] = embedded
    return databases


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
    keys = KeyStore(settings.keys_path).audit_log(tenant, limit, before)
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
    """Back up the keys, the sources, the query history and the embedded store while the
    server runs (SQLite online backup); a PostgreSQL store is backed up with pg_dump instead."""
    from ragserve.sqlite_db import check_integrity, copy_database

    settings = _settings(data_dir, config, store)
    if target.exists() and any(target.iterdir()):
        console.print(f"[red]error:[/red] {target} is not empty; back up into a new folder")
        raise typer.Exit(2)
    target.mkdir(parents=True, exist_ok=True)
    databases = _databases(settings)
    copied = {}
    for name, source in databases.items():
        if not source.exists():
            continue
        copy_database(source, target / name)
        check_integrity(target / name)
        copied[name] = str(source)
    in_postgresql = INDEX_FILE not in databases
    manifest = {"created_at": time.time(), "files": copied, "index_in_postgresql": in_postgresql}
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2))
    if as_json:
        print(json.dumps({"backup": str(target), **manifest}))
        return
    for name, source in copied.items():
        console.print(f"{source} -> {target / name}")
    if in_postgresql:
        console.print("the documents are in PostgreSQL: back them up with pg_dump")


@app.command()
def restore(
    source: Annotated[Path, typer.Argument(help="A folder made by `ragserve backup`.")],
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Restore from a backup, also while the server runs: its next request sees the restored
    documents, keys, sources and query history. Keys revoked since the backup stay revoked."""
    from ragserve.history import QueryHistory
    from ragserve.keys import KeyStore
    from ragserve.rag.sources.registry import SourceRegistry
    from ragserve.rag.stores.sqlite import SqliteStore
    from ragserve.services import DocumentIndex
    from ragserve.sqlite_db import restore_database

    settings = _settings(data_dir, config, store)
    names = list(dict.fromkeys([INDEX_FILE, *_databases(settings)]))
    found = [name for name in names if (source / name).is_file()]
    if not found:
        console.print(f"[red]error:[/red] {source} holds none of {', '.join(names)}")
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
        if settings.keys_path.name in found:
            keys = KeyStore(settings.keys_path)
            keys.restore_from(source / settings.keys_path.name, actor="operator")
            restored.append(str(keys.path))
        # Replaced whole, each opened once staged to bring an older backup's tables up to date.
        for live, upgrade in (
            (settings.sources_path, lambda staged: SourceRegistry(staged).close()),
            (settings.history_path, lambda staged: QueryHistory(staged, 0, False).close()),
        ):
            if live.name in found:
                restore_database(source / live.name, live, upgrade)
                restored.append(str(live))
    except ValueError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(1) from error
    if as_json:
        print(json.dumps({"restored": restored, "from": str(source)}))
    else:
        for path in restored:
            console.print(f"restored {path}")
