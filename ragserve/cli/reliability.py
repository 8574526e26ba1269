"""`ragserve eval crash|races`: reliability under kill -9 during ingestion, and under concurrent
writers and readers. Each exits 1 when its check fails."""

from pathlib import Path
from typing import Annotated

import typer

from ragserve.cli.eval_common import (
    ConfigOption,
    JsonOption,
    OutOption,
    PgserverOption,
    StoreOption,
    console,
    finish,
    load_settings,
    scratch_store,
)

reliability_app = typer.Typer()


@reliability_app.command("crash")
def crash(
    store: StoreOption = None,
    pgserver_dir: PgserverOption = None,
    kills: Annotated[int, typer.Option(help="Kills to deliver.", min=1)] = 20,
    documents: Annotated[int, typer.Option(help="Documents in the corpus.", min=1)] = 300,
    max_delay: Annotated[
        float, typer.Option(help="Latest kill, in seconds after the first stored document.")
    ] = 8.0,
    seed: int = 0,
    config: ConfigOption = None,
    out: OutOption = Path("reports/eval"),
    as_json: JsonOption = False,
) -> None:
    """Kill -9 an ingesting process at random moments, then check that every document it
    reported stored is whole and nothing partial is visible; a last run must embed only what
    never got stored. Exits 1 if a document is lost or damaged."""
    import tempfile

    from ragserve.eval import crash as harness
    from ragserve.reports import run_metadata

    settings = load_settings(config)
    with tempfile.TemporaryDirectory() as folder:
        overrides = {
            "data_dir": Path(folder) / "data",
            "store": scratch_store(store, pgserver_dir),
        }
        settings = settings.model_copy(update=overrides)
        with console.status("ingesting and killing") as status:
            report = harness.run(
                settings, Path(folder), kills, documents, max_delay, seed, status.update
            )
    meta = run_metadata(kills=kills, documents=documents, max_delay_s=max_delay, seed=seed)
    paths = harness.write(report, out, meta)
    finish(report.as_json(), harness.to_markdown(report, meta), paths, as_json)
    if not report.passed:
        raise typer.Exit(1)


@reliability_app.command("races")
def races(
    store: StoreOption = None,
    pgserver_dir: PgserverOption = None,
    duration: Annotated[float, typer.Option(help="Seconds of concurrent load.", min=1)] = 30.0,
    writers: Annotated[int, typer.Option(help="Writer keys.", min=1)] = 4,
    readers: Annotated[int, typer.Option(help="Reader keys.", min=1)] = 6,
    seed: int = 0,
    config: ConfigOption = None,
    out: OutOption = Path("reports/eval"),
    as_json: JsonOption = False,
) -> None:
    """Writers ingest, re-ingest, delete and re-permission documents while readers search and
    ask, over HTTP against an in-process server; every read is then checked against the writes
    around it. Exits 1 on a violation or a failed request (5xx, no response, internal error)."""
    from ragserve.eval import race_report, races

    settings = load_settings(config).model_copy(
        update={"store": scratch_store(store, pgserver_dir)}
    )
    with console.status(f"racing {writers} writers against {readers} readers"):
        report = races.run(settings, races.RacePlan(duration, writers, readers, seed))
    paths = race_report.write(report, out)
    finish(report, race_report.to_markdown(report), paths, as_json)
    if not report["summary"]["passed"]:
        raise typer.Exit(1)
