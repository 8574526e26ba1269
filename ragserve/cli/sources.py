"""`ragserve sync`: folders and websites the index follows: add, set, run, list, remove."""

import json
import re
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress
from rich.table import Table

from ragserve.cli.common import console
from ragserve.cli.documents import GrantOption, GroupGrantOption, _acl
from ragserve.cli.options import (
    ConfigOption,
    DataDirOption,
    JsonOption,
    StoreOption,
    TenantOption,
)
from ragserve.rag.sources.acl_map import AclMap, AclMapError
from ragserve.rag.sources.registry import SourceConfig, SourceError, SourceRegistry

sync_app = typer.Typer(
    no_args_is_help=True, help="Sources the index follows: add, run, list, remove."
)
INTERVAL = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _settings(data_dir: Path | None, config: Path | None, store: str | None = None):
    from ragserve.settings import Settings

    return Settings.load(config, data_dir=data_dir, store=store)


def _registry(data_dir: Path | None, config: Path | None) -> SourceRegistry:
    return SourceRegistry(_settings(data_dir, config).sources_path)


def interval_s(every: str | None) -> float | None:
    """'90s', '10m', '2h' or '1d' in seconds; a usage error otherwise."""
    if every is None:
        return None
    found = INTERVAL.fullmatch(every)
    if found is None:
        raise typer.BadParameter(f"{every!r}: a number and s, m, h or d, e.g. 10m")
    return float(found[1]) * UNIT_S[found[2]]


@sync_app.command("add")
def sync_add(
    name: Annotated[str, typer.Argument(help="The source's name (letters, digits, . _ -).")],
    folder: Annotated[Path | None, typer.Option(help="A folder to follow (recursively).")] = None,
    url: Annotated[
        str | None,
        typer.Option(help="A website to follow: its sitemap, or a crawl from this page."),
    ] = None,
    max_pages: Annotated[int, typer.Option(min=1, help="A website's page cap.")] = 1000,
    max_depth: Annotated[
        int, typer.Option(min=0, help="Links a crawl follows from the start page.")
    ] = 5,
    user: GrantOption = None,
    group: GroupGrantOption = None,
    acl_map: Annotated[
        Path | None,
        typer.Option(help="JSON rules from path globs to grants, over --user/--group."),
    ] = None,
    include: Annotated[
        list[str] | None, typer.Option(help="A path glob to take; repeatable.")
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option(help="A path glob to skip; repeatable.")
    ] = None,
    every: Annotated[str | None, typer.Option(help="Sync interval when serving, e.g. 10m.")] = None,
    tenant: TenantOption = "default",
    owner: Annotated[str, typer.Option(help="The documents' owner (always may read).")] = "admin",
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
) -> None:
    """Follow a folder (--folder) or a website (--url): its files or pages become documents
    with stable ids, kept in sync by `sync run` (and by the server every --every). A website's
    paths, for the ACL map and the globs, are its pages' URLs and URL paths."""
    acl = _acl(user, group)
    try:
        rules = AclMap.load(acl_map) if acl_map else AclMap(acl)
        if acl_map and (user or group):
            rules = AclMap(acl, rules.rules)
        source = SourceConfig(
            name,
            str(folder.resolve()) if folder else None,
            tenant,
            owner,
            rules.to_json(),
            include or ["*"],
            exclude or [],
            interval_s(every),
            url,
            max_pages,
            max_depth,
        )
        registry = _registry(data_dir, config)
        registry.add(source)
    except (AclMapError, SourceError) as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None
    console.print(f"source {name!r} follows {source.location}; `ragserve sync run {name}` syncs it")


@sync_app.command("set")
def sync_set(
    name: Annotated[str, typer.Argument(help="The source to change.")],
    acl_map: Annotated[
        Path | None, typer.Option(help="A new ACL map (JSON): applied at the next sync.")
    ] = None,
    every: Annotated[str | None, typer.Option(help="A new sync interval, e.g. 10m.")] = None,
    tenant: TenantOption = "default",
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
) -> None:
    """Change a source's ACL map or interval; the next sync re-permissions the documents whose
    ACL changed without reading their files again."""
    registry = _registry(data_dir, config)
    try:
        source = registry.get(tenant, name)
        if acl_map is not None:
            source.acl_map = AclMap.load(acl_map).to_json()
        if every is not None:
            source.every_s = interval_s(every)
        registry.update(source)
    except (AclMapError, SourceError) as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None
    console.print(f"source {name!r} changed; `ragserve sync run {name}` applies it")


@sync_app.command("run")
def sync_run(
    name: Annotated[str, typer.Argument(help="The source to sync.")],
    tenant: TenantOption = "default",
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Bring the index in line with the source: report added, changed, deleted, unchanged,
    re-permissioned and failed files (with reasons)."""
    from ragserve.rag.sources.sync import SourceSync
    from ragserve.services import DocumentIndex

    settings = _settings(data_dir, config, store)
    registry = SourceRegistry(settings.sources_path)
    try:
        source = registry.get(tenant, name)
    except SourceError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None
    index = DocumentIndex.open(settings)
    sync = SourceSync(index.store, index.ingestor, registry)
    try:
        with Progress(console=console, disable=as_json, transient=True) as progress:
            task = progress.add_task(f"syncing {name}", total=None)
            report = sync.run(
                source, lambda done, total: progress.update(task, completed=done, total=total)
            )
    except OSError as error:
        # A folder that is not there, a site that does not answer.
        console.print(f"[red]error:[/red] {error}; nothing was changed")
        raise typer.Exit(1) from None
    finally:
        index.store.close()
        registry.close()
    if as_json:
        print(json.dumps(report.as_json()))
    else:
        console.print(
            f"{name}: {report.added} added, {report.changed} changed, {report.deleted} deleted, "
            f"{report.unchanged} unchanged, {report.repermissioned} re-permissioned, "
            f"{len(report.failed)} failed; {report.embedded_chunks} chunks embedded, "
            f"{report.reused_chunks} reused, {report.seconds:.1f} s"
        )
        for failure in report.failed:
            console.print(f"[red]failed:[/red] {failure['reason']}")
    if report.failed:
        raise typer.Exit(1)


@sync_app.command("list")
def sync_list(
    data_dir: DataDirOption = None, config: ConfigOption = None, as_json: JsonOption = False
) -> None:
    """Every tenant's sources, with their last sync's report."""
    from dataclasses import asdict

    sources = _registry(data_dir, config).all()
    if as_json:
        print(json.dumps([asdict(s) | {"last_report": r} for s, r in sources]))
        return
    table = Table("name", "folder or url", "tenant", "every", "last sync")
    for source, report in sources:
        last = "never"
        if report is not None:
            last = (
                f"{report['added']} added, {report['changed']} changed, "
                f"{report['deleted']} deleted, {len(report['failed'])} failed"
            )
        every = f"{source.every_s:g} s" if source.every_s else "-"
        table.add_row(source.name, source.location, source.tenant, every, last)
    console.print(table)


@sync_app.command("remove")
def sync_remove(
    name: Annotated[str, typer.Argument(help="The source to stop following.")],
    tenant: TenantOption = "default",
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
) -> None:
    """Stop following a source; its documents stay in the index (delete them with `docs
    delete`, or empty the folder and sync before removing)."""
    try:
        _registry(data_dir, config).remove(tenant, name)
    except SourceError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from None
    console.print(f"source {name!r} removed; its documents stay in the index")
