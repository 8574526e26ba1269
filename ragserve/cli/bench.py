"""`ragserve bench ...`: the group, its engine-side commands (offline, ingest, grammar), and
every bench command registered in the order the help lists them."""

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from ragserve.cli.bench_compare import compare
from ragserve.cli.bench_load import rag, serve
from ragserve.cli.common import console, show_report
from ragserve.cli.options import (
    JsonOption,
    JsonReportOption,
    ModelOption,
    OutOption,
    PgserverOption,
    token_range,
)
from ragserve.cli.reliability import cache_oracle, soak
from ragserve.engine.config import DEFAULT_MODEL, EngineConfig

bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (they print figures and reports).")


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
    hf_dtypes: Annotated[
        str, typer.Option(help="transformers dtypes to compare with, comma-separated.")
    ] = "float32,bfloat16",
    model: str = DEFAULT_MODEL,
    dtype: str = EngineConfig.dtype,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 512,
    seed: int = 0,
    out: OutOption = Path("reports"),
    as_json: JsonOption = False,
) -> None:
    """Engine throughput against transformers on the same random workload."""
    from ragserve.bench.offline import run, to_markdown, write_report
    from ragserve.engine.kv_cache import DTYPES

    baseline_dtypes = tuple(name.strip() for name in hf_dtypes.split(",") if name.strip())
    unknown = [name for name in baseline_dtypes if name not in DTYPES]
    if unknown:
        raise typer.BadParameter(
            f"unknown dtype {', '.join(unknown)}; choose from {', '.join(DTYPES)}",
            param_hint="--hf-dtypes",
        )
    config = EngineConfig(
        model=model,
        dtype=dtype,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    report = run(
        config,
        num_requests,
        token_range(input_len),
        token_range(output_len),
        hf_batch1_requests,
        hf_static_batch,
        seed,
        baseline_dtypes,
    )
    show_report(report, to_markdown(report), write_report(report, out), as_json)


def ingest(
    store: Annotated[str, typer.Option(help="Store URL: a path, or postgresql://...")] = "",
    pgserver_dir: PgserverOption = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N articles.")] = None,
    queries: int = 200,
    k: int = 10,
    chunk_size: int = 128,
    dtype: Annotated[
        str, typer.Option(help="What documents embed in: auto, float32 or bfloat16.")
    ] = "auto",
    out: OutOption = Path("reports"),
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
        report = run(store, limit, queries, k, chunk_size, dtype)
    finally:
        if server is not None:
            server.cleanup()
    name = "ingest-postgres" if store.startswith("postgres") else "ingest-sqlite"
    write_report(report, out, name)
    print(json.dumps(report, indent=2))


def sync(
    files: Annotated[int, typer.Option(help="Files in the generated folder.", min=200)] = 10_000,
    store: Annotated[str, typer.Option(help="Store URL: a path, or postgresql://...")] = "",
    pgserver_dir: PgserverOption = None,
    seed: int = 0,
    out: OutOption = Path("reports"),
) -> None:
    """A generated folder (Markdown, text, HTML, Word) synced, changed by 1% edited, 0.5%
    deleted, 0.5% added and one ACL-map rule, and synced again: the first sync's chunks/s, the
    re-sync's share of its time, and whether the re-sync did exactly what changed."""
    import tempfile

    from ragserve.bench.sync import run, to_markdown
    from ragserve.reports import run_metadata, write_report
    from ragserve.settings import Settings

    if pgserver_dir is not None:
        import pgserver

        store = pgserver.get_server(pgserver_dir, cleanup_mode="stop").get_uri()
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(data_dir=Path(data_dir), store=store or None)
        report = run(settings, files, seed) | {"run": run_metadata(files=files, seed=seed)}
    name = "sync-postgres" if store.startswith("postgres") else "sync-sqlite"
    write_report(out, name, report, to_markdown(report))
    print(json.dumps(report, indent=2))
    if not report["exact"] or report["documents_with_a_wrong_acl"]:
        raise typer.Exit(1)


def grammar(
    model: ModelOption = None,
    batches: Annotated[str, typer.Option(help="Constrained sequences per step.")] = "1,8,32",
) -> None:
    """What structured output costs per step: compiling a JSON schema, filling and applying
    the masks of a batch of constrained sequences."""
    from ragserve.bench.grammar import measure

    sizes = [int(b) for b in batches.split(",")]
    console.print_json(data=measure(model or DEFAULT_MODEL, sizes))


def quantization(
    model: ModelOption = None,
    formats: Annotated[
        str,
        typer.Option(
            help="DTYPE:QUANTIZATION[:KV_CACHE_DTYPE] formats, comma-separated, against float32."
        ),
    ] = "bfloat16:none,bfloat16:int8,float32:int8,bfloat16:none:int8,bfloat16:int8:int8",
    out: OutOption = Path("reports"),
    as_json: JsonReportOption = False,
) -> None:
    """What a weight or KV cache format costs in quality (perplexity on fixed text, greedy
    agreement with the float32 model over 64 prompts) next to the decode speed it buys."""
    from ragserve.bench.quantization import measure, to_markdown
    from ragserve.reports import write_report

    parts = [item.split(":") for item in formats.split(",")]
    if any(len(part) not in (2, 3) for part in parts):
        raise typer.BadParameter(
            "formats are DTYPE:QUANTIZATION[:KV_CACHE_DTYPE], e.g. bfloat16:int8 or "
            "bfloat16:none:int8"
        )
    name = model or DEFAULT_MODEL
    results = measure(
        name, [(part[0], part[1], part[2] if len(part) == 3 else "auto") for part in parts]
    )
    report = {"model": name, "formats": [asdict(result) for result in results]}
    markdown = to_markdown(name, results)
    show_report(report, markdown, write_report(out, "quantization", report, markdown), as_json)


COMMANDS = (
    ("offline", offline),
    ("ingest", ingest),
    ("sync", sync),
    ("serve", serve),
    ("grammar", grammar),
    ("quantization", quantization),
    ("compare", compare),
    ("soak", soak),
    ("rag", rag),
    ("cache-oracle", cache_oracle),
)
for name, command in COMMANDS:
    bench_app.command(name)(command)
