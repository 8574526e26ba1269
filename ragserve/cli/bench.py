"""`ragserve bench ...` commands."""

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown

from ragserve.bench.load_options import (
    CancelShareOption,
    ConstrainedShareOption,
    DatasetOption,
    InputLenOption,
    JsonOption,
    KeyOption,
    MaxPromptOption,
    MaxTotalOption,
    ModelOption,
    OutputLenOption,
    PrefixGroupsOption,
    PrefixLenOption,
    RateOption,
    ReportDirOption,
    ReportNameOption,
    SloOption,
    SweepOption,
    TemperatureOption,
    TokenizerOption,
    UrlOption,
    caller,
    completion_jobs,
    dataset_of,
    load_plan,
    run_plan,
    show_report,
    token_range,
    write_load_report,
)
from ragserve.cli.bench_compare import compare_command
from ragserve.cli.bench_oracle import cache_oracle
from ragserve.engine.config import DEFAULT_MODEL, EngineConfig

bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (they print figures and reports).")


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
    hf_dtypes: Annotated[
        str, typer.Option(help="transformers dtypes to compare with, comma-separated.")
    ] = "float32,bfloat16",
    model: str = DEFAULT_MODEL,
    dtype: str = EngineConfig.dtype,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 512,
    seed: int = 0,
    out: Annotated[Path, typer.Option(help="Report folder.")] = Path("reports"),
    as_json: Annotated[bool, typer.Option("--json")] = False,
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


@bench_app.command("serve")
def serve(
    url: UrlOption,
    api_key: KeyOption = None,
    model: ModelOption = None,
    dataset_name: DatasetOption = "random",
    num_requests: int = 200,
    input_len: InputLenOption = "128-512",
    output_len: OutputLenOption = "32-256",
    prefix_len: PrefixLenOption = 512,
    prefix_groups: PrefixGroupsOption = 4,
    max_prompt: MaxPromptOption = 1024,
    max_total: MaxTotalOption = 2048,
    request_rate: RateOption = float("inf"),
    burstiness: Annotated[float, typer.Option(help="Gamma shape of the gaps; 1 is Poisson.")] = 1.0,
    max_concurrency: Annotated[int | None, typer.Option(help="Most requests in flight.")] = None,
    cancel_share: CancelShareOption = 0.0,
    constrained_share: ConstrainedShareOption = 0.0,
    temperature: TemperatureOption = 0.0,
    slo: SloOption = None,
    sweep_rates: SweepOption = None,
    tokenizer: TokenizerOption = DEFAULT_MODEL,
    seed: int = 0,
    out: ReportDirOption = Path("reports/bench"),
    name: ReportNameOption = "serve",
    as_json: JsonOption = False,
) -> None:
    """Load an OpenAI-compatible server's /v1/completions with realistic lengths and arrivals."""
    plan = load_plan(
        (request_rate, burstiness, max_concurrency, cancel_share, seed), slo, sweep_rates
    )
    dataset = dataset_of(
        dataset_name, input_len, output_len, prefix_len, prefix_groups, max_prompt, max_total
    )
    keys = api_key or [""]
    make_jobs, model = completion_jobs(
        url, keys, model, dataset, tokenizer, seed, constrained_share, temperature
    )
    runs = run_plan(url, lambda run_seed: make_jobs(run_seed, num_requests), plan)
    workload_text = (
        f"{dataset_name}, {num_requests} requests, {dataset.describe()}, "
        f"burstiness {burstiness}, {len(keys)} keys, cancel share {cancel_share}, "
        f"constrained share {constrained_share}, temperature {temperature}"
    )
    meta = {"url": url, "model": model, "workload": workload_text, "seed": seed}
    write_load_report("Serving benchmark", meta, runs, out, name, as_json)


@bench_app.command("grammar")
def grammar(
    model: ModelOption = None,
    batches: Annotated[str, typer.Option(help="Constrained sequences per step.")] = "1,8,32",
) -> None:
    """What structured output costs per step: compiling a JSON schema, filling and applying
    the masks of a batch of constrained sequences."""
    from ragserve.bench.grammar import measure

    sizes = [int(b) for b in batches.split(",")]
    Console().print_json(data=measure(model or DEFAULT_MODEL, sizes))


bench_app.command("compare")(compare_command)


@bench_app.command("soak")
def soak(
    url: UrlOption,
    api_key: KeyOption = None,
    model: ModelOption = None,
    duration: Annotated[float, typer.Option(help="Seconds of load.")] = 900.0,
    warmup: Annotated[
        float | None,
        typer.Option(help="Seconds of load before memory counts (default: a fifth of it)."),
    ] = None,
    capacity: Annotated[
        float | None,
        typer.Option(help="The request rate the server sustains (default: measured first)."),
    ] = None,
    overload: Annotated[float, typer.Option(help="Offered rate over the capacity.")] = 1.5,
    cancel_share: CancelShareOption = 0.2,
    capacity_concurrency: Annotated[
        int, typer.Option(help="Requests kept in flight while measuring the capacity.")
    ] = 32,
    capacity_requests: Annotated[
        int, typer.Option(help="Requests of the capacity run (more than its concurrency).")
    ] = 64,
    drain_limit: Annotated[
        float | None,
        typer.Option(
            help="Seconds the queue may take to drain after the load (default: twice what "
            "the capacity needs for the requests then in flight, + 10)."
        ),
    ] = None,
    sample_every: Annotated[
        float, typer.Option(help="Seconds between reads of the server's /metrics.")
    ] = 2.0,
    dataset_name: DatasetOption = "sharegpt",
    input_len: InputLenOption = "128-512",
    output_len: OutputLenOption = "32-256",
    prefix_len: PrefixLenOption = 512,
    prefix_groups: PrefixGroupsOption = 4,
    max_prompt: MaxPromptOption = 1024,
    max_total: MaxTotalOption = 2048,
    tokenizer: TokenizerOption = DEFAULT_MODEL,
    seed: int = 0,
    out: ReportDirOption = Path("reports/bench"),
    name: ReportNameOption = "soak",
    as_json: JsonOption = False,
) -> None:
    """Hold a server at 1.5x its capacity with cancelling clients, then check it: no 5xx, fast
    refusals with Retry-After, flat memory, a drained queue and an empty KV cache (exit 1 if
    not). See ragserve/bench/soak.py."""
    from ragserve.bench import soak as soak_bench

    try:
        settings = soak_bench.SoakSettings(
            duration,
            duration / 5 if warmup is None else warmup,
            overload,
            cancel_share,
            capacity,
            capacity_concurrency,
            capacity_requests,
            drain_limit,
            sample_every,
            seed,
        )
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    dataset = dataset_of(
        dataset_name, input_len, output_len, prefix_len, prefix_groups, max_prompt, max_total
    )
    keys = api_key or [""]
    make_jobs, model = completion_jobs(url, keys, model, dataset, tokenizer, seed)
    workload = (
        f"{dataset_name}, {dataset.describe()}, Poisson arrivals, {len(keys)} keys round-robin, "
        f"cancel share {cancel_share}"
    )
    report, paths = soak_bench.run(url, model, make_jobs, workload, settings, out, name)
    show_report(report, soak_bench.to_markdown(report), paths, as_json)
    if not report["passed"]:
        raise typer.Exit(1)


@bench_app.command("rag")
def rag(
    url: UrlOption,
    dataset: Annotated[Path, typer.Option(help="JSONL with a question per line.")],
    api_key: KeyOption = None,
    num_requests: int = 100,
    request_rate: RateOption = float("inf"),
    burstiness: float = 1.0,
    max_concurrency: int | None = None,
    cancel_share: float = 0.0,
    slo: SloOption = None,
    sweep_rates: SweepOption = None,
    seed: int = 0,
    out: ReportDirOption = Path("reports/bench"),
    name: ReportNameOption = "rag",
    as_json: JsonOption = False,
) -> None:
    """Load POST /v1/answers with a dataset's questions; adds the server's time split."""
    import random

    from ragserve.bench.client import answer

    plan = load_plan(
        (request_rate, burstiness, max_concurrency, cancel_share, seed), slo, sweep_rates
    )
    keys = api_key or [""]
    questions = [json.loads(line)["question"] for line in dataset.read_text().splitlines() if line]
    rng = random.Random(seed)

    def make_jobs(run_seed: int):
        rng.seed(run_seed)
        chosen = [rng.choice(questions) for _ in range(num_requests)]

        def job(question, n):
            key, user = caller(keys, n)
            return lambda client, cancel_after: answer(client, question, key, user, cancel_after)

        # Answers stream at most answer_max_tokens chunks; cancel within the first 32.
        return [(job(q, n), 32) for n, q in enumerate(chosen)]

    runs = run_plan(url, make_jobs, plan)
    workload_text = (
        f"{num_requests} questions from {dataset.name}, burstiness {burstiness}, "
        f"{len(keys)} keys, cancel share {cancel_share}"
    )
    meta = {"url": url, "workload": workload_text, "seed": seed}
    write_load_report("RAG answer benchmark", meta, runs, out, name, as_json)


bench_app.command("cache-oracle")(cache_oracle)
