"""The `ragserve` command line."""

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ragserve.bench.cli import bench_app
from ragserve.engine.config import DEFAULT_MODEL
from ragserve.eval.cli import eval_app
from ragserve.server.auth import KeyStore, Role

if TYPE_CHECKING:
    from ragserve.rag.answer import AnswerResult
    from ragserve.rag.documents import AccessFilter, Acl
    from ragserve.rag.store import Store
    from ragserve.server.settings import ServerSettings

app = typer.Typer(no_args_is_help=True, help="ragserve: LLM serving with permission-aware RAG.")
keys_app = typer.Typer(no_args_is_help=True, help="API keys: create, list, revoke.")
app.add_typer(bench_app, name="bench")
app.add_typer(eval_app, name="eval")
app.add_typer(keys_app, name="keys")
console = Console()


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@app.command()
def generate(
    prompt: str,
    max_tokens: Annotated[int, typer.Option(help="Most tokens to generate.")] = 64,
    temperature: Annotated[float, typer.Option(help="0 for greedy decoding.")] = 0.0,
    top_p: float = 1.0,
    top_k: int = -1,
    seed: int | None = None,
    stop: Annotated[list[str] | None, typer.Option(help="Stop string; repeatable.")] = None,
    chat: Annotated[bool, typer.Option(help="Apply the model's chat template.")] = False,
    model: str = DEFAULT_MODEL,
    dtype: str = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Generate a completion for PROMPT with the offline engine."""
    from ragserve.engine.errors import EngineError
    from ragserve.engine.sampling_params import SamplingParams
    from ragserve.llm import LLM

    try:
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            seed=seed,
            stop=stop,
        )
        llm = LLM(model=model, dtype=dtype)
        messages = [{"role": "user", "content": prompt}]
        output = (llm.chat(messages, params) if chat else llm.generate(prompt, params))[0]
    except EngineError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from error
    completion = output.outputs[0]
    if as_json:
        record = {
            "model": model,
            "text": completion.text,
            "finish_reason": completion.finish_reason,
            "prompt_tokens": len(output.prompt_token_ids),
            "completion_tokens": len(completion.token_ids),
            "ttft_s": output.metrics.time_to_first_token,
        }
        print(json.dumps(record))
    else:
        console.print(completion.text)


ConfigOption = Annotated[Path | None, typer.Option("--config", help="TOML settings file.")]
DataDirOption = Annotated[Path | None, typer.Option(help="Where keys and documents live.")]


@app.command()
def serve(
    host: str | None = None,
    port: int | None = None,
    model: str | None = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
) -> None:
    """Serve the OpenAI-compatible API (settings: --config FILE, then RAGSERVE_* variables)."""
    import uvicorn

    from ragserve.server.app import build_app
    from ragserve.server.settings import ServerSettings

    settings = ServerSettings.load(config, host=host, port=port, model=model, data_dir=data_dir)
    app_ = build_app(settings)
    console.print(f"serving {settings.model} on http://{settings.host}:{settings.port}")
    uvicorn.run(app_, host=settings.host, port=settings.port, log_level="warning")


def _key_store(data_dir: Path | None, config: Path | None) -> KeyStore:
    from ragserve.server.settings import ServerSettings

    settings = ServerSettings.load(config, data_dir=data_dir)
    return KeyStore(settings.data_dir / "keys.sqlite")


@keys_app.command("create")
def keys_create(
    user: Annotated[str, typer.Option(help="The user this key acts as.")],
    group: Annotated[list[str] | None, typer.Option(help="A group; repeatable.")] = None,
    tenant: str = "default",
    role: Annotated[str, typer.Option(help="reader, writer or admin.")] = "reader",
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
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
    as_json: Annotated[bool, typer.Option("--json")] = False,
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
    as_json: Annotated[bool, typer.Option("--json")] = False,
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


docs_app = typer.Typer(
    no_args_is_help=True, help="Documents in the index: list, show, delete, acl."
)
app.add_typer(docs_app, name="docs")
StoreOption = Annotated[
    str | None, typer.Option("--store", help="Store URL (default: data_dir/index.sqlite).")
]
TenantOption = Annotated[str, typer.Option(help="The tenant the documents belong to.")]
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


def _rag_settings(
    data_dir: Path | None, config: Path | None, store: str | None
) -> "ServerSettings":
    from ragserve.server.settings import ServerSettings

    return ServerSettings.load(config, data_dir=data_dir, store=store)


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
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Parse, chunk, embed and index documents with an ACL (users and groups)."""
    from ragserve.rag.corpus import load_wiki, wiki_sources
    from ragserve.rag.embeddings import Embedder
    from ragserve.rag.ingest import Ingestor, read_sources
    from ragserve.rag.store import open_store

    if not paths and not wiki:
        console.print("[red]error:[/red] give files or folders, or --wiki")
        raise typer.Exit(2)
    settings = _rag_settings(data_dir, config, store)
    embedder = Embedder(settings.embedding_model)
    index = open_store(settings.store_url, embedder.dimension)
    ingestor = Ingestor(index, embedder, settings.chunk_size, settings.chunk_overlap)
    items = list(read_sources(paths or []))
    if wiki:
        items += list(wiki_sources(load_wiki(limit=wiki_limit)))
    acl = _acl(user, group)
    with Progress(console=console, disable=as_json, transient=True) as progress:
        task = progress.add_task("ingesting", total=len(items))
        results = ingestor.ingest_many(
            items, tenant, owner, acl, progress=lambda _: progress.advance(task)
        )
    index.close()
    failed = [r for r in results if not r.ok]
    if as_json:
        print(json.dumps([asdict(r) for r in results]))
    else:
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
) -> tuple["Store", "AccessFilter"]:
    """The local operator's view: the configured store, and a filter seeing all of a tenant."""
    from ragserve.rag.documents import AccessFilter
    from ragserve.rag.embeddings import Embedder
    from ragserve.rag.store import open_store

    settings = _rag_settings(data_dir, config, store)
    index = open_store(settings.store_url, Embedder(settings.embedding_model).dimension)
    return index, AccessFilter(tenant, "operator", everything=True)


def _no_document(doc_id: str, tenant: str, quiet: bool = False) -> typer.Exit:
    if not quiet:
        console.print(f"[red]error:[/red] no document {doc_id!r} in tenant {tenant!r}")
    return typer.Exit(1)


def _print_documents(documents: list, access: "AccessFilter", as_json: bool) -> None:
    from ragserve.server.documents import document_json

    if as_json:
        print(json.dumps([document_json(d, access) for d in documents]))
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
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List the tenant's documents with their ACLs."""
    index, access = _operator(tenant, data_dir, config, store)
    _print_documents(index.list_documents(access), access, as_json)


@docs_app.command("show")
def docs_show(
    doc_id: str,
    tenant: TenantOption = "default",
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show one document."""
    index, access = _operator(tenant, data_dir, config, store)
    document = index.get_document(access, doc_id)
    if document is None:
        raise _no_document(doc_id, tenant)
    _print_documents([document], access, as_json)


@docs_app.command("delete")
def docs_delete(
    doc_id: str,
    tenant: TenantOption = "default",
    store: StoreOption = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Delete a document; the next query no longer sees it."""
    index, access = _operator(tenant, data_dir, config, store)
    deleted = index.delete_document(access, doc_id)
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
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Replace a document's ACL (the users and groups given; none: owner only)."""
    index, access = _operator(tenant, data_dir, config, store)
    if not index.set_acl(access, doc_id, _acl(user, group)):
        raise _no_document(doc_id, tenant)
    _print_documents([index.get_document(access, doc_id)], access, as_json)


@app.command()
def ask(
    question: str,
    key: Annotated[str | None, typer.Option(help="Answer as this API key's principal.")] = None,
    user: Annotated[str | None, typer.Option(help="Or answer as this user.")] = None,
    group: Annotated[list[str] | None, typer.Option(help="The user's groups; repeatable.")] = None,
    tenant: TenantOption = "default",
    top_k: int | None = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Answer a question from the documents the principal may read (local, no server)."""
    import asyncio

    from ragserve.engine.engine import LLMEngine
    from ragserve.rag.embeddings import Embedder
    from ragserve.server.answers import answer_json
    from ragserve.server.async_engine import AsyncEngine
    from ragserve.server.auth import Principal
    from ragserve.server.settings import ServerSettings
    from ragserve.server.state import RagServices, access_for

    settings = ServerSettings.load(config, data_dir=data_dir)
    if key is not None:
        principal = KeyStore(settings.data_dir / "keys.sqlite").authenticate(key)
        if principal is None:
            console.print("[red]error:[/red] invalid or revoked API key")
            raise typer.Exit(2)
    elif user is not None:
        principal = Principal(user, frozenset(group or []), tenant, Role.READER, key_id=0)
    else:
        console.print("[red]error:[/red] give --key KEY or --user USER")
        raise typer.Exit(2)
    engine = LLMEngine(settings.engine_config())
    rag = RagServices.build(settings, engine, Embedder(settings.embedding_model))
    runner = AsyncEngine(engine)
    runner.start()

    generate = runner.generator(principal.user, principal.tenant, "ask")

    async def answer() -> "AnswerResult | None":
        result = None
        async for event in rag.answers.answer(access_for(principal), question, generate, top_k):
            result = event.result or result
        return result

    try:
        result = asyncio.run(answer())
    finally:
        runner.shutdown()
        rag.store.close()
    if as_json:
        print(json.dumps(answer_json(result)))
        return
    kind = {"generated": "answer", "extractive": "quoted from the source", "refused": "refused"}
    console.print(f"[dim]({kind[result.mode]})[/dim] {result.answer}")
    for citation in result.citations:
        console.print(f"[{citation.n}] {citation.title} ({citation.doc_id}): “{citation.quote}”")


DEMO_RESTRICTED = {
    "board-memo-acquisition": (
        "Board memo: acquisition of Globex",
        "The board approved the acquisition of Globex Corporation for 120 million euros. "
        "The deal is code-named Bluebird and closes on 30 September.",
    ),
    "board-memo-layoffs": (
        "Board memo: site consolidation",
        "The Springfield plant will close in March; its 140 staff move to the Shelbyville site.",
    ),
}


@app.command()
def demo(
    wiki_limit: Annotated[int, typer.Option(help="Wikipedia articles to index.")] = 1000,
    host: str | None = None,
    port: int | None = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
) -> None:
    """Index part of the bundled Wikipedia corpus and two board-only memos, print two keys
    (a staff reader and a board member), and serve the API."""
    import uvicorn

    from ragserve.engine.engine import LLMEngine
    from ragserve.rag.corpus import load_wiki, wiki_sources
    from ragserve.rag.documents import AccessFilter, Acl
    from ragserve.rag.embeddings import Embedder
    from ragserve.rag.ingest import SourceDocument
    from ragserve.rag.parsers import parse_text
    from ragserve.server.app import build_app
    from ragserve.server.settings import ServerSettings
    from ragserve.server.state import RagServices

    settings = ServerSettings.load(config, data_dir=data_dir, host=host, port=port)
    engine = LLMEngine(settings.engine_config())
    embedder = Embedder(settings.embedding_model)
    rag = RagServices.build(settings, engine, embedder)
    if not rag.store.list_documents(AccessFilter("default", "admin", everything=True)):
        items = list(wiki_sources(load_wiki(limit=wiki_limit)))
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("indexing Wikipedia", total=len(items))
            rag.ingestor.ingest_many(
                items,
                "default",
                "admin",
                Acl.of(groups=["staff"]),
                progress=lambda _: progress.advance(task),
            )
        for doc_id, (title, text) in DEMO_RESTRICTED.items():
            parsed = parse_text(text, title)
            parsed.title = title
            rag.ingestor.ingest(
                SourceDocument(f"memo:{doc_id}", parsed=parsed, doc_id=doc_id),
                "default",
                "admin",
                Acl.of(groups=["board"]),
            )
    rag.store.close()
    keys = KeyStore(settings.data_dir / "keys.sqlite")
    reader, _ = keys.create("alice", ["staff"])
    board, _ = keys.create("bob", ["staff", "board"])
    url = f"http://{settings.host}:{settings.port}"
    console.print(f"staff reader key (alice): {reader}\nboard member key (bob):   {board}")
    question = '{"question": "How much does the Globex acquisition cost?", "top_k": 3}'
    console.print(
        f"try both keys:\n  curl -s {url}/v1/answers -H 'Authorization: Bearer KEY' "
        f"-H 'Content-Type: application/json' -d '{question}'\n"
        "alice never sees the memo (it is board-only); bob gets its sentence, quoted and cited."
    )
    app_ = build_app(settings, engine, embedder)
    uvicorn.run(app_, host=settings.host, port=settings.port, log_level="warning")
