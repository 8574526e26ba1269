"""Commands on the document index: ingest, and `ragserve docs` (list, show, delete, acl)."""

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import Progress
from rich.table import Table

from ragserve.cli.common import app, console
from ragserve.cli.options import (
    ConfigOption,
    DataDirOption,
    JsonOption,
    StoreOption,
    TenantOption,
)
from ragserve.serving.errors import NotFound

if TYPE_CHECKING:
    from ragserve.access import Principal
    from ragserve.rag.documents import Acl
    from ragserve.rag.ingest import IngestResult
    from ragserve.serving.documents import DocumentService
    from ragserve.settings import Settings

docs_app = typer.Typer(
    no_args_is_help=True, help="Documents in the index: list, show, delete, acl."
)
GRANT_HELP = "NAME or NAME:read|write|manage (read when no level is given); repeatable."
GrantOption = Annotated[list[str] | None, typer.Option(help=f"A user granted access: {GRANT_HELP}")]
GroupGrantOption = Annotated[
    list[str] | None, typer.Option(help=f"A group granted access: {GRANT_HELP}")
]


def _acl(users: list[str] | None, groups: list[str] | None) -> "Acl":
    """An ACL from NAME[:LEVEL] options; a bad level is a usage error."""
    from ragserve.rag.documents import Acl, Permission

    def grants(values: list[str] | None) -> dict[str, Permission]:
        parsed = {}
        for value in values or []:
            name, _, level = value.rpartition(":")
            if not name or level.upper() not in Permission.__members__:
                name, level = value, "read"
            parsed[name] = Permission.parse(level)
        return parsed

    return Acl.of(grants(users), grants(groups))


def _rag_settings(data_dir: Path | None, config: Path | None, store: str | None) -> "Settings":
    from ragserve.settings import Settings

    return Settings.load(config, data_dir=data_dir, store=store)


@app.command()
def ingest(
    paths: Annotated[list[Path] | None, typer.Argument(help="Files or folders.")] = None,
    user: GrantOption = None,
    group: GroupGrantOption = None,
    tenant: TenantOption = "default",
    owner: Annotated[str, typer.Option(help="The owner (always may read).")] = "admin",
    wiki: Annotated[bool, typer.Option(help="Ingest the bundled Wikipedia corpus.")] = False,
    wiki_limit: Annotated[int | None, typer.Option(help="Only the first N articles.")] = None,
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
    as_jsonl: Annotated[
        bool,
        typer.Option(
            "--jsonl",
            help="Print each document's result as one JSON line the moment it is stored or "
            "refused (to follow a long ingest from a script).",
        ),
    ] = False,
) -> None:
    """Parse, chunk, embed and index documents with an ACL (users and groups)."""
    from ragserve.rag.corpus import load_wiki, wiki_sources
    from ragserve.rag.documents import AccessFilter
    from ragserve.rag.ingest import read_sources
    from ragserve.services import DocumentIndex

    if not paths and not wiki:
        console.print("[red]error:[/red] give files or folders, or --wiki")
        raise typer.Exit(2)
    index = DocumentIndex.open(_rag_settings(data_dir, config, store))
    items = list(read_sources(paths or []))
    if wiki:
        items += list(wiki_sources(load_wiki(limit=wiki_limit)))
    acl = _acl(user, group)
    with Progress(console=console, disable=as_json or as_jsonl, transient=True) as progress:
        task = progress.add_task("ingesting", total=len(items))

        def stored(result: "IngestResult") -> None:
            progress.advance(task)
            if as_jsonl:
                print(json.dumps(asdict(result)), flush=True)

        operator = AccessFilter(tenant, "operator", everything=True)
        results = index.ingestor.ingest_many(
            items, tenant, owner, acl, progress=stored, writer=operator
        )
    index.store.close()
    failed = [r for r in results if not r.ok]
    if as_json:
        print(json.dumps([asdict(r) for r in results]))
    elif not as_jsonl:
        for result in failed:
            console.print(f"[red]not ingested:[/red] {result.error}")
        done = [r for r in results if r.ok]
        console.print(
            f"ingested {len(done)} documents, {sum(r.chunks for r in done)} chunks "
            f"({sum(r.embedded for r in done)} embedded, {sum(r.reused for r in done)} reused); "
            f"{len(failed)} failed"
        )
    if failed:
        raise typer.Exit(1)


def _operator(
    tenant: str, data_dir: Path | None, config: Path | None, store: str | None
) -> tuple["DocumentService", "Principal"]:
    """The local operator: an administrator of the tenant, through the same DocumentService
    as the HTTP routes."""
    from ragserve.access import Principal, Role
    from ragserve.services import DocumentIndex
    from ragserve.serving.documents import DocumentService

    index = DocumentIndex.open(_rag_settings(data_dir, config, store))
    return DocumentService(index), Principal("operator", frozenset(), tenant, Role.ADMIN, 0)


def _no_document(doc_id: str, tenant: str, quiet: bool = False) -> typer.Exit:
    if not quiet:
        console.print(f"[red]error:[/red] no document {doc_id!r} in tenant {tenant!r}")
    return typer.Exit(1)


def _print_documents(documents: list, who: "Principal", as_json: bool) -> None:
    if as_json:
        from ragserve.access import access_for
        from ragserve.rag.documents import document_json

        print(json.dumps([document_json(d, access_for(who)) for d in documents]))
        return
    table = Table("id", "title", "source", "owner", "users", "groups", "chunks", "version")
    for d in documents:
        table.add_row(
            d.doc_id,
            d.title[:40],
            d.source[-40:],
            d.owner,
            ",".join(f"{name}:{level.label}" for name, level in d.acl.users),
            ",".join(f"{name}:{level.label}" for name, level in d.acl.groups),
            str(d.num_chunks),
            str(d.version),
        )
    console.print(table)


@docs_app.command("list")
def docs_list(
    tenant: TenantOption = "default",
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the tenant's documents with their ACLs."""
    documents, who = _operator(tenant, data_dir, config, store)
    _print_documents(documents.visible(who), who, as_json)


@docs_app.command("show")
def docs_show(
    doc_id: str,
    tenant: TenantOption = "default",
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one document."""
    documents, who = _operator(tenant, data_dir, config, store)
    try:
        document = documents.get(who, doc_id)
    except NotFound:
        raise _no_document(doc_id, tenant) from None
    _print_documents([document], who, as_json)


@docs_app.command("delete")
def docs_delete(
    doc_id: str,
    tenant: TenantOption = "default",
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a document; the next query no longer sees it."""
    documents, who = _operator(tenant, data_dir, config, store)
    try:
        documents.delete(who, doc_id)
        deleted = True
    except NotFound:
        deleted = False
    if as_json:
        print(json.dumps({"id": doc_id, "deleted": deleted}))
    elif deleted:
        console.print(f"deleted {doc_id}")
    if not deleted:
        raise _no_document(doc_id, tenant, quiet=as_json)


@docs_app.command("acl")
def docs_acl(
    doc_id: str,
    user: GrantOption = None,
    group: GroupGrantOption = None,
    tenant: TenantOption = "default",
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replace a document's ACL (the users and groups given; none: owner only)."""
    documents, who = _operator(tenant, data_dir, config, store)
    try:
        document = documents.set_acl(who, doc_id, _acl(user, group))
    except NotFound:
        raise _no_document(doc_id, tenant) from None
    _print_documents([document], who, as_json)


@docs_app.command("versions")
def docs_versions(
    doc_id: str,
    tenant: TenantOption = "default",
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """A document's current and kept earlier versions, newest first."""
    documents, who = _operator(tenant, data_dir, config, store)
    try:
        versions = documents.versions(who, doc_id)
    except NotFound:
        raise _no_document(doc_id, tenant) from None
    if as_json:
        from ragserve.access import access_for
        from ragserve.rag.documents import version_json

        print(json.dumps([version_json(v, versions[0], access_for(who)) for v in versions]))
        return
    _print_documents(versions, who, as_json=False)


@docs_app.command("restore")
def docs_restore(
    doc_id: str,
    version: Annotated[int, typer.Argument(help="The earlier version to write back.")],
    tenant: TenantOption = "default",
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write an earlier version back as the newest (its ACL: the grants the current ACL and
    the version's both make)."""
    documents, who = _operator(tenant, data_dir, config, store)
    try:
        restored = documents.restore(who, doc_id, version)
    except NotFound as error:
        console.print(f"[red]error:[/red] {error.message}")
        raise typer.Exit(1) from None
    _print_documents([restored], who, as_json)
