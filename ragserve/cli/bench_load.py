"""`ragserve bench serve` and `ragserve bench rag`: load a running server at planned request
rates (bench/serve.py measures); and what the load commands share: the checked load plan, the
served model, the report."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragserve.cli.common import show_report
from ragserve.cli.options import (
    CancelShareOption,
    DatasetNameOption,
    InputLenOption,
    JsonOption,
    KeyOption,
    MaxPromptOption,
    MaxTotalOption,
    ModelOption,
    OutOption,
    OutputLenOption,
    PrefixGroupsOption,
    PrefixLenOption,
    RateOption,
    ReportNameOption,
    SloOption,
    SweepOption,
    TemperatureOption,
    TokenizerOption,
    UrlOption,
    workload_options,
)
from ragserve.engine.config import DEFAULT_MODEL

if TYPE_CHECKING:
    from ragserve.bench.serve import LoadPlan


def load_plan(
    rate: float,
    burstiness: float,
    max_concurrency: int | None,
    cancel_share: float,
    seed: int,
    slo: list[str] | None,
    sweep_rates: str | None,
) -> "LoadPlan":
    """The load options as one plan, checked before any request goes out."""
    from ragserve.bench.load import LoadSettings
    from ragserve.bench.measures import Slo
    from ragserve.bench.serve import LoadPlan

    if not 0 <= cancel_share <= 1:
        raise typer.BadParameter("--cancel-share must be within [0, 1]")
    if burstiness <= 0 or rate <= 0:
        raise typer.BadParameter("--request-rate and --burstiness must be positive")
    if max_concurrency is not None and max_concurrency < 1:
        raise typer.BadParameter("--max-concurrency must be at least 1")
    settings = LoadSettings(rate, burstiness, max_concurrency, cancel_share, seed)
    try:
        objectives = Slo.parse(slo or [])
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    return LoadPlan(settings, objectives, _rates(sweep_rates, rate))


def _rates(sweep_rates: str | None, rate: float) -> tuple[float, ...]:
    if not sweep_rates:
        return (rate,)
    try:
        rates = tuple(float(r) for r in sweep_rates.split(","))
    except ValueError as error:
        raise typer.BadParameter(f"--sweep-rates must be numbers, got {sweep_rates!r}") from error
    if min(rates) <= 0:
        raise typer.BadParameter("--sweep-rates must be positive")
    return rates


def served_model(url: str, key: str, model: str | None) -> str:
    """The model asked for, or the server's first; a usage error when the server cannot say."""
    from ragserve.bench.jobs import first_model

    if model is not None:
        return model
    try:
        return first_model(url, key)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error


def show_load_report(report: dict, out: Path, name: str, as_json: bool) -> None:
    from ragserve.bench.serve import to_markdown, write

    show_report(report, to_markdown(report), write(report, out, name), as_json)


def serve(
    url: UrlOption,
    api_key: KeyOption = None,
    model: ModelOption = None,
    dataset_name: DatasetNameOption = "random",
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
    constrained_share: Annotated[
        float, typer.Option(help="Share of requests whose output must match a JSON schema.")
    ] = 0.0,
    temperature: TemperatureOption = 0.0,
    slo: SloOption = None,
    sweep_rates: SweepOption = None,
    tokenizer: TokenizerOption = DEFAULT_MODEL,
    seed: int = 0,
    out: OutOption = Path("reports/bench"),
    name: ReportNameOption = "serve",
    as_json: JsonOption = False,
) -> None:
    """Load an OpenAI-compatible server's /v1/completions with realistic lengths and arrivals."""
    from ragserve.bench import serve as serve_bench
    from ragserve.bench.jobs import completion_jobs

    plan = load_plan(
        request_rate, burstiness, max_concurrency, cancel_share, seed, slo, sweep_rates
    )
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
    if not 0 <= constrained_share <= 1:
        raise typer.BadParameter("--constrained-share must be within [0, 1]")
    keys = api_key or [""]
    model = served_model(url, keys[0], model)
    make_jobs = completion_jobs(keys, model, workload, seed, constrained_share, temperature)
    described = (
        f"{dataset_name}, {num_requests} requests, {workload.dataset.describe()}, "
        f"burstiness {burstiness}, {len(keys)} keys, cancel share {cancel_share}, "
        f"constrained share {constrained_share}, temperature {temperature}"
    )
    meta = {"url": url, "model": model, "workload": described, "seed": seed}
    report = serve_bench.run("Serving benchmark", url, make_jobs, num_requests, plan, meta)
    show_load_report(report, out, name, as_json)


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
    out: OutOption = Path("reports/bench"),
    name: ReportNameOption = "rag",
    as_json: JsonOption = False,
) -> None:
    """Load POST /v1/answers with a dataset's questions; adds the server's time split."""
    from ragserve.bench import serve as serve_bench
    from ragserve.bench.jobs import answer_jobs

    plan = load_plan(
        request_rate, burstiness, max_concurrency, cancel_share, seed, slo, sweep_rates
    )
    keys = api_key or [""]
    questions = [json.loads(line)["question"] for line in dataset.read_text().splitlines() if line]
    described = (
        f"{num_requests} questions from {dataset.name}, burstiness {burstiness}, "
        f"{len(keys)} keys, cancel share {cancel_share}"
    )
    meta = {"url": url, "workload": described, "seed": seed}
    make_jobs = answer_jobs(questions, keys, seed)
    report = serve_bench.run("RAG answer benchmark", url, make_jobs, num_requests, plan, meta)
    show_load_report(report, out, name, as_json)
