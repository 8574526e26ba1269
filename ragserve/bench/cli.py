"""`ragserve bench ...` commands."""

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown

from ragserve.engine.config import DEFAULT_MODEL

bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (they print figures and reports).")


def _range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


@bench_app.command("offline")
def offline(
    num_requests: Annotated[int, typer.Option(help="Requests submitted at once.")] = 128,
    input_len: Annotated[str, typer.Option(help="Prompt tokens, LOW-HIGH.")] = "64-512",
    output_len: Annotated[str, typer.Option(help="Output tokens, LOW-HIGH.")] = "64-256",
    hf_batch1_requests: Annotated[
        int, typer.Option(help="Requests for the transformers batch-1 run (0: skip).")
    ] = 4,
    hf_static_batch: Annotated[
        int, typer.Option(help="Static batch size for transformers (0: skip).")
    ] = 32,
    model: str = DEFAULT_MODEL,
    dtype: str = "bfloat16",
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 512,
    seed: int = 0,
    out: Annotated[Path, typer.Option(help="Report folder.")] = Path("reports"),
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Engine throughput against transformers on the same random workload."""
    from ragserve.bench.offline import run, to_markdown, write_report
    from ragserve.engine.config import EngineConfig

    config = EngineConfig(
        model=model,
        dtype=dtype,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    report = run(
        config,
        num_requests,
        _range(input_len),
        _range(output_len),
        hf_batch1_requests,
        hf_static_batch,
        seed,
    )
    write_report(report, out)
    if as_json:
        print(json.dumps(report))
    else:
        Console().print(Markdown(to_markdown(report)))


@bench_app.command("ingest")
def ingest(
    store: Annotated[str, typer.Option(help="Store URL: a path, or postgresql://...")] = "",
    pgserver_dir: Annotated[
        Path | None, typer.Option(help="Start a PostgreSQL (pgserver) in this folder and use it.")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N articles.")] = None,
    queries: int = 200,
    k: int = 10,
    chunk_size: int = 128,
    out: Annotated[Path, typer.Option(help="Report folder.")] = Path("reports"),
) -> None:
    """Ingestion throughput and ACL-filtered search latency on the Wikipedia corpus."""
    import tempfile

    from ragserve.bench.ingest import run, write_report

    server = None
    if pgserver_dir is not None:
        import pgserver

        server = pgserver.get_server(pgserver_dir, cleanup_mode="stop")
        store = server.get_uri()
    if not store:
        store = str(Path(tempfile.mkdtemp()) / "bench.sqlite")
    try:
        report = run(store, limit, queries, k, chunk_size)
    finally:
        if server is not None:
            server.cleanup()
    name = "ingest-postgres" if store.startswith("postgres") else "ingest-sqlite"
    write_report(report, out, name)
    print(json.dumps(report, indent=2))
