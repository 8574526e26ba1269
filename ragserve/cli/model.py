"""Commands that run the model: generate, serve, ask and demo."""

import gc
import json
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import Progress

from ragserve.access import Principal, Role
from ragserve.cli.common import app, console, err_console
from ragserve.cli.options import ConfigOption, DataDirOption, JsonOption, TenantOption
from ragserve.engine.config import DEFAULT_MODEL, EngineConfig
from ragserve.keys import KeyStore

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ragserve.rag.answer import AnswerResult, Generate
    from ragserve.settings import Settings


class AnswerStyle(StrEnum):
    QUOTE = "quote"
    GENERATE = "generate"
    AUTO = "auto"


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
    dtype: str = EngineConfig.dtype,
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


@app.command()
def serve(
    host: str | None = None,
    port: int | None = None,
    model: str | None = None,
    also_serve: Annotated[
        list[str] | None,
        typer.Option(help="Serve this model too, on an engine of its own; repeatable."),
    ] = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    replicas: Annotated[
        int | None, typer.Option(min=1, help="Engine replicas, on Ray Serve when more than 1.")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Deploy on this Ray cluster (default: start one here).")
    ] = None,
    routing: Annotated[
        str | None, typer.Option(help="Between replicas: prefix (default) or power_of_two.")
    ] = None,
) -> None:
    """Serve the OpenAI-compatible API (settings: --config FILE, then RAGSERVE_* variables)."""
    from ragserve.server.app import build_app
    from ragserve.settings import Settings

    settings = Settings.load(
        config,
        host=host,
        port=port,
        model=model,
        also_serve=also_serve,
        data_dir=data_dir,
        replicas=replicas,
        ray_address=ray_address,
        routing=routing,
    )
    if settings.replicas > 1 or settings.ray_address:
        if settings.also_serve:
            console.print("[red]error:[/red] also_serve runs in one process, not on replicas")
            raise typer.Exit(2)
        serve_on_ray(settings)
        return
    app_ = build_app(settings)
    served = ", ".join([settings.model, *settings.also_serve])
    console.print(f"serving {served} on http://{settings.host}:{settings.port}")
    run_server(app_, settings)


def run_server(app_: "FastAPI", settings: "Settings") -> None:
    """Serve until stopped. What startup loaded (models, indexes, libraries: about 300,000
    objects) lives as long as the process, so it leaves the garbage collector's view first: a
    full collection walking it took about 200 ms, and stopped every stream that long (once in
    90 s of 32 streams, AMD EPYC family 25)."""
    import uvicorn

    gc.collect()
    gc.freeze()
    uvicorn.run(app_, host=settings.host, port=settings.port, log_level="warning")


def serve_on_ray(settings: "Settings") -> None:
    import signal
    import time

    try:
        from ragserve.cluster.deploy import deployed
    except ImportError as error:
        console.print(
            f"[red]error:[/red] {error.msg}; install Ray with: pip install 'ragserve[ray]'"
        )
        raise typer.Exit(2) from error

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # A service manager's SIGTERM takes the replicas down as Ctrl-C does (and SIGINT is
    # heard even where a shell started the server in the background, ignoring it).
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with deployed(settings) as url:
        console.print(
            f"serving {settings.model} on {url}: {settings.replicas} engine replicas, "
            f"{settings.api_replicas} API replicas, {settings.routing} routing (Ctrl-C stops)"
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            console.print("stopping")


STYLE_HELP = (
    "quote: the evidence that states the answer quoted, without the model; generate: the model "
    "answers from the evidence (checked); auto: a quote when one sentence states the answer, "
    "the model when several must be combined (default: the answer_style setting)."
)


@app.command()
def ask(
    question: str,
    key: Annotated[str | None, typer.Option(help="Answer as this API key's principal.")] = None,
    user: Annotated[str | None, typer.Option(help="Or answer as this user.")] = None,
    group: Annotated[list[str] | None, typer.Option(help="The user's groups; repeatable.")] = None,
    tenant: TenantOption = "default",
    top_k: int | None = None,
    style: Annotated[AnswerStyle | None, typer.Option(help=STYLE_HELP)] = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Answer a question from the documents the principal may read (local, no server). The
    model is loaded only when the answer needs it: a quoted answer never loads it."""
    import asyncio

    from ragserve.access import access_for
    from ragserve.services import ModelOnDemand, RagServices
    from ragserve.settings import Settings

    try:
        settings = Settings.load(config, data_dir=data_dir)
    except ValueError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from error
    if key is not None:
        principal = KeyStore(settings.keys_path).authenticate(key)
        if principal is None:
            console.print("[red]error:[/red] invalid or revoked API key")
            raise typer.Exit(2)
    elif user is not None:
        principal = Principal(user, frozenset(group or []), tenant, Role.READER, key_id=0)
    else:
        console.print("[red]error:[/red] give --key KEY or --user USER")
        raise typer.Exit(2)
    model = ModelOnDemand(settings, notify=notice)
    rag = RagServices.build(settings, model)

    async def answer(generate: "Generate") -> "AnswerResult | None":
        result = None
        chosen = None if style is None else style.value
        answers = rag.answers.answer(access_for(principal), question, generate, top_k, style=chosen)
        async for event in answers:
            result = event.result or result
        return result

    try:
        result = asyncio.run(answer(model.generator(principal.user, principal.tenant, "ask")))
    finally:
        model.shutdown()
        rag.store.close()
    if as_json:
        from ragserve.rag.answer_result import answer_json

        print(json.dumps(answer_json(result)))
        return
    kind = {"generated": "answer", "extractive": "quoted from the source", "refused": "refused"}
    console.print(f"[dim]({kind[result.mode]})[/dim] {result.answer}")
    if result.related:
        console.print("[dim]closest passages you can read:[/dim]")
    for citation in result.citations or result.related:
        console.print(f"[{citation.n}] {citation.title} ({citation.doc_id}): “{citation.quote}”")


def notice(message: str) -> None:
    """One line on stderr when something slow starts, so a first run is not silent."""
    err_console.print(f"[dim]{message}[/dim]")


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
    """Index part of the bundled Wikipedia corpus and two board-only memos, print four keys
    (a staff reader, a board member, a staff writer, an administrator), and serve the API and
    the web page."""
    from ragserve.rag.corpus import load_wiki, wiki_sources
    from ragserve.rag.documents import AccessFilter, Acl
    from ragserve.rag.ingest import SourceDocument
    from ragserve.rag.parsers import parse_text
    from ragserve.server.app import build_app
    from ragserve.services import DocumentIndex
    from ragserve.settings import Settings

    settings = Settings.load(config, data_dir=data_dir, host=host, port=port)
    index = DocumentIndex.open(settings)
    if not index.store.list_documents(AccessFilter("default", "admin", everything=True)):
        items = list(wiki_sources(load_wiki(limit=wiki_limit)))
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("indexing Wikipedia", total=len(items))
            index.ingestor.ingest_many(
                items,
                "default",
                "admin",
                Acl.of(groups=["staff"]),
                progress=lambda _: progress.advance(task),
            )
        for doc_id, (title, text) in DEMO_RESTRICTED.items():
            parsed = parse_text(text, title)
            parsed.title = title
            index.ingestor.ingest(
                SourceDocument(f"memo:{doc_id}", parsed=parsed, doc_id=doc_id),
                "default",
                "admin",
                Acl.of(groups=["board"]),
            )
    index.store.close()
    keys = KeyStore(settings.keys_path)
    reader, _ = keys.create("alice", ["staff"])
    board, _ = keys.create("bob", ["staff", "board"])
    writer, _ = keys.create("carol", ["staff"], role=Role.WRITER)
    admin, _ = keys.create("olivia", ["ops"], role=Role.ADMIN)
    url = f"http://{settings.host}:{settings.port}"
    console.print(
        f"staff reader key (alice):  {reader}\nboard member key (bob):    {board}\n"
        f"staff writer key (carol):  {writer}\nadministrator key (olivia): {admin}"
    )
    question = '{"question": "How much does the Globex acquisition cost?", "top_k": 3}'
    console.print(
        f"try both reader keys:\n  curl -s {url}/v1/answers -H 'Authorization: Bearer KEY' "
        f"-H 'Content-Type: application/json' -d '{question}'\n"
        "alice never sees the memo (it is board-only); bob gets its sentence, quoted and cited.\n"
        f"open {url} and sign in with a key: ask, browse and upload documents, watch the server."
    )
    app_ = build_app(settings, embedder=index.embedder)
    run_server(app_, settings)
