"""What the load-driving bench commands (serve, rag) share: their options, the checked load
plan, the run over the planned rates, and the report."""

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown

UrlOption = Annotated[str, typer.Option(help="The server's root, e.g. http://127.0.0.1:8000.")]
KeyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--api-key",
        help="An API key; repeatable: requests go round-robin over them "
        "(several users or tenants).",
    ),
]
RateOption = Annotated[float, typer.Option(help="Requests per second (inf: all at once).")]
SweepOption = Annotated[
    str | None, typer.Option(help="Comma-separated request rates to run one after another.")
]
SloOption = Annotated[
    list[str] | None, typer.Option("--slo", help="ttft:MS, tpot:MS or e2e:MS; repeatable.")
]


def _load_settings(
    rate: float, burstiness: float, max_concurrency: int | None, cancel_share: float, seed: int
):
    from ragserve.bench.load import LoadSettings

    if not 0 <= cancel_share <= 1:
        raise typer.BadParameter("--cancel-share must be within [0, 1]")
    if burstiness <= 0 or rate <= 0:
        raise typer.BadParameter("--request-rate and --burstiness must be positive")
    if max_concurrency is not None and max_concurrency < 1:
        raise typer.BadParameter("--max-concurrency must be at least 1")
    return LoadSettings(rate, burstiness, max_concurrency, cancel_share, seed)


def _rates(sweep_rates: str | None, rate: float) -> list[float]:
    if not sweep_rates:
        return [rate]
    try:
        rates = [float(r) for r in sweep_rates.split(",")]
    except ValueError as error:
        raise typer.BadParameter(f"--sweep-rates must be numbers, got {sweep_rates!r}") from error
    if min(rates) <= 0:
        raise typer.BadParameter("--sweep-rates must be positive")
    return rates


def load_plan(load: tuple, slo: list[str] | None, sweep_rates: str | None):
    """Checked load settings, SLOs and rates, before any request goes out. `load` is
    (rate, burstiness, max_concurrency, cancel_share, seed)."""
    from ragserve.bench.measures import Slo

    settings = _load_settings(*load)
    try:
        objectives = Slo.parse(slo or [])
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    return settings, objectives, _rates(sweep_rates, settings.rate)


def run_plan(url: str, make_jobs, plan) -> list:
    import asyncio

    from ragserve.bench.serve import sweep

    settings, objectives, rates = plan
    return asyncio.run(sweep(url, make_jobs, rates, settings, objectives))


def caller(keys: list[str], n: int) -> tuple[str, str]:
    """The key and user name of the n-th request: round-robin over the keys."""
    return keys[n % len(keys)], f"user-{n % len(keys)}"


def write_load_report(
    kind: str, meta: dict, runs: list, out: Path, name: str, as_json: bool
) -> None:
    from ragserve.bench.serve import to_markdown, write
    from ragserve.reports import run_metadata, to_json

    report = {"meta": run_metadata(title=kind, **meta), "runs": runs}
    paths = write(report, out, name)
    if as_json:
        print(to_json(report))
    else:
        Console().print(Markdown(to_markdown(report).split("\n## Run")[0]))
        Console(stderr=True).print("reports: " + ", ".join(str(p) for p in paths))
