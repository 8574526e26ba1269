"""The reliability harnesses' commands: `ragserve eval crash|sync-crash|races` (kill -9 during
ingestion, kill -9 during source syncs, concurrent writers and readers), `ragserve bench soak`
(overload held for minutes) and `ragserve bench cache-oracle` (a prefix-cache side channel).
Each but the oracle exits 1 when its check fails."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragserve.cli.bench_load import served_model
from ragserve.cli.common import err_console, load_settings, scratch_store, show_report
from ragserve.cli.options import (
    CancelShareOption,
    ConfigOption,
    DatasetNameOption,
    InputLenOption,
    JsonOption,
    JsonReportOption,
    KeyOption,
    MaxPromptOption,
    MaxTotalOption,
    ModelOption,
    OutOption,
    OutputLenOption,
    PgserverOption,
    PrefixGroupsOption,
    PrefixLenOption,
    ReportNameOption,
    ScratchStoreOption,
    TokenizerOption,
    UrlOption,
    workload_options,
)
from ragserve.engine.config import DEFAULT_MODEL

if TYPE_CHECKING:
    from ragserve.settings import Settings


def _scratch(
    config: Path | None, folder: Path, store: str | None, pgserver_dir: Path | None
) -> "Settings":
    """The settings with a data folder inside `folder` and a store a harness may fill."""
    overrides = {"data_dir": folder / "data", "store": scratch_store(store, pgserver_dir)}
    return load_settings(config).model_copy(update=overrides)


def crash(
    store: ScratchStoreOption = None,
    pgserver_dir: PgserverOption = None,
    kills: Annotated[int, typer.Option(help="Kills to deliver.", min=1)] = 20,
    documents: Annotated[int, typer.Option(help="Documents in the corpus.", min=1)] = 300,
    max_delay: Annotated[
        float, typer.Option(help="Latest kill, in seconds after the first stored document.")
    ] = 8.0,
    seed: int = 0,
    config: ConfigOption = None,
    out: OutOption = Path("reports/eval"),
    as_json: JsonReportOption = False,
) -> None:
    """Kill -9 an ingesting process at random moments, then check that every document it
    reported stored is whole and nothing partial is visible; a last run must embed only what
    never got stored. Exits 1 if a document is lost or damaged."""
    import tempfile

    from ragserve.reliability import crash as harness
    from ragserve.reports import run_metadata

    with tempfile.TemporaryDirectory() as folder:
        settings = _scratch(config, Path(folder), store, pgserver_dir)
        with err_console.status("ingesting and killing") as status:
            report = harness.run(
                settings, Path(folder), kills, documents, max_delay, seed, status.update
            )
    meta = run_metadata(kills=kills, documents=documents, max_delay_s=max_delay, seed=seed)
    paths = harness.write(report, out, meta)
    show_report(report.as_json(), harness.to_markdown(report, meta), paths, as_json)
    if not report.passed:
        raise typer.Exit(1)


def sync_crash(
    store: ScratchStoreOption = None,
    pgserver_dir: PgserverOption = None,
    rounds: Annotated[int, typer.Option(help="Syncs to kill.", min=1)] = 20,
    files: Annotated[int, typer.Option(help="Files in the folder at first.", min=1)] = 300,
    seed: int = 0,
    config: ConfigOption = None,
    out: OutOption = Path("reports/eval"),
    as_json: JsonReportOption = False,
) -> None:
    """Kill -9 a syncing process at random moments while the folder changes (edits, deletes,
    additions, ACL-map changes); after a last sync the index must equal a clean sync of the
    final folder. Exits 1 if it does not."""
    import tempfile

    from ragserve.reliability import sync_crash as harness
    from ragserve.reports import run_metadata

    with tempfile.TemporaryDirectory() as folder:
        settings = _scratch(config, Path(folder), store, pgserver_dir)
        with err_console.status("syncing and killing") as status:
            report = harness.run(settings, Path(folder), rounds, files, seed, status.update)
    meta = run_metadata(rounds=rounds, files=files, seed=seed)
    paths = harness.write(report, out, meta)
    show_report(report.as_json(), harness.to_markdown(report), paths, as_json)
    if not report.passed:
        raise typer.Exit(1)


def races(
    store: ScratchStoreOption = None,
    pgserver_dir: PgserverOption = None,
    duration: Annotated[float, typer.Option(help="Seconds of concurrent load.", min=1)] = 30.0,
    writers: Annotated[int, typer.Option(help="Writer keys.", min=1)] = 4,
    readers: Annotated[int, typer.Option(help="Reader keys.", min=1)] = 6,
    seed: int = 0,
    config: ConfigOption = None,
    out: OutOption = Path("reports/eval"),
    as_json: JsonReportOption = False,
) -> None:
    """Writers ingest, re-ingest, delete and re-permission documents while readers search and
    ask, over HTTP against an in-process server; every read is then checked against the writes
    around it. Exits 1 on a violation or a failed request (5xx, no response, internal error)."""
    from ragserve.reliability import race_report, races

    settings = load_settings(config).model_copy(
        update={"store": scratch_store(store, pgserver_dir)}
    )
    with err_console.status(f"racing {writers} writers against {readers} readers"):
        report = races.run(settings, races.RacePlan(duration, writers, readers, seed))
    paths = race_report.write(report, out)
    show_report(report, race_report.to_markdown(report), paths, as_json)
    if not report["summary"]["passed"]:
        raise typer.Exit(1)


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
    dataset_name: DatasetNameOption = "sharegpt",
    input_len: InputLenOption = "128-512",
    output_len: OutputLenOption = "32-256",
    prefix_len: PrefixLenOption = 512,
    prefix_groups: PrefixGroupsOption = 4,
    max_prompt: MaxPromptOption = 1024,
    max_total: MaxTotalOption = 2048,
    tokenizer: TokenizerOption = DEFAULT_MODEL,
    seed: int = 0,
    out: OutOption = Path("reports/bench"),
    name: ReportNameOption = "soak",
    as_json: JsonOption = False,
) -> None:
    """Hold a server at 1.5x its capacity with cancelling clients, then check it: no 5xx, fast
    refusals with Retry-After, flat memory, a drained queue and an empty KV cache (exit 1 if
    not). See ragserve/reliability/soak.py."""
    from ragserve.bench.jobs import completion_jobs
    from ragserve.reliability import soak as harness

    try:
        settings = harness.SoakSettings(
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
    workload = workload_options(
        dataset_name,
        input_len,
        output_len,
        prefix_len,
        prefix_groups,
        max_prompt,
        max_total,
        tokenizer,
    )
    keys = api_key or [""]
    model = served_model(url, keys[0], model)
    make_jobs = completion_jobs(keys, model, workload, seed)
    described = (
        f"{dataset_name}, {workload.dataset.describe()}, Poisson arrivals, {len(keys)} keys "
        f"round-robin, cancel share {cancel_share}"
    )
    report, paths = harness.run(url, model, make_jobs, described, settings, out, name)
    show_report(report, harness.to_markdown(report), paths, as_json)
    if not report["passed"]:
        raise typer.Exit(1)


def cache_oracle(
    url: UrlOption,
    admin_key: Annotated[str, typer.Option(help="A key that may add and delete documents.")],
    reader_key: Annotated[str, typer.Option(help="A key in the restricted group.")],
    outsider_key: Annotated[str, typer.Option(help="A key of the same tenant, outside it.")],
    restricted_group: str = "board",
    trials: int = 100,
    model: Annotated[str, typer.Option(help="The served model (for its tokenizer).")] = (
        DEFAULT_MODEL
    ),
    answer_max_tokens: Annotated[int, typer.Option(help="The server's setting.")] = 48,
    evidence_budget: Annotated[int, typer.Option(help="The server's setting.")] = 256,
    datamark: Annotated[bool, typer.Option(help="The server's setting.")] = True,
    evidence_sentences: Annotated[int, typer.Option(help="The server's setting.")] = 3,
    seed: int = 0,
    out: OutOption = Path("reports/bench"),
    as_json: JsonOption = False,
) -> None:
    """Can a caller confirm a guess at a document it may not read, through the prefix cache
    (cached tokens, time to first token)? Run it against a server whose answers run the model
    (answer_style = "generate"); see ragserve/reliability/oracle.py."""
    from ragserve.reliability.oracle import Oracle, OracleSettings, to_markdown
    from ragserve.reports import write_report

    settings = OracleSettings(
        url,
        admin_key,
        reader_key,
        outsider_key,
        restricted_group,
        model,
        answer_max_tokens,
        evidence_budget,
        datamark,
        evidence_sentences=evidence_sentences,
        trials=trials,
        seed=seed,
    )
    report = Oracle(settings).run()
    markdown = to_markdown(report)
    show_report(report, markdown, write_report(out, "cache-oracle", report, markdown), as_json)
