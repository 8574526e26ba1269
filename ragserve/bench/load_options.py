"""What the load-driving bench commands (serve, rag, soak) share: their options, the checked load
plan, the completion jobs of a dataset, the run over the planned rates, and the report."""

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown

if TYPE_CHECKING:
    from ragserve.bench.load import Job
    from ragserve.bench.workload import Dataset, RandomText

# Jobs for a run: given the run's seed and how many requests.
JobMaker = Callable[[int, int], list[tuple["Job", int]]]

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
CancelShareOption = Annotated[float, typer.Option(help="Share of clients that cancel mid-stream.")]
ConstrainedShareOption = Annotated[
    float, typer.Option(help="Share of requests whose output must match a JSON schema.")
]
TemperatureOption = Annotated[
    float,
    typer.Option(min=0, max=2, help="Every request's sampling temperature (0: greedy), no seed."),
]
ModelOption = Annotated[str | None, typer.Option(help="Model id (default: the server's first).")]
DatasetOption = Annotated[str, typer.Option(help="random, sharegpt or shared-prefix.")]
InputLenOption = Annotated[
    str, typer.Option(help="Prompt tokens, LOW-HIGH (random, suffix of shared-prefix).")
]
OutputLenOption = Annotated[str, typer.Option(help="Output tokens, LOW-HIGH (not sharegpt).")]
PrefixLenOption = Annotated[int, typer.Option(help="shared-prefix: tokens of each prefix.")]
PrefixGroupsOption = Annotated[int, typer.Option(help="shared-prefix: distinct prefixes.")]
MaxPromptOption = Annotated[int, typer.Option(help="sharegpt: longest prompt kept.")]
MaxTotalOption = Annotated[int, typer.Option(help="sharegpt: longest prompt + output kept.")]
TokenizerOption = Annotated[
    str, typer.Option(help="Tokenizer for prompt lengths: a model name or folder.")
]
# Where a load command writes its report (JSON, Markdown, plots), and whether it prints JSON.
ReportDirOption = Annotated[Path, typer.Option("--out", help="Report folder.")]
ReportNameOption = Annotated[str, typer.Option("--name", help="Report file name.")]
JsonOption = Annotated[bool, typer.Option("--json")]


def token_range(text: str) -> tuple[int, int]:
    """LOW-HIGH (or one number) as a pair."""
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def dataset_of(
    name: str,
    input_len: str,
    output_len: str,
    prefix_len: int,
    prefix_groups: int,
    max_prompt: int,
    max_total: int,
) -> "Dataset":
    """The dataset options, checked before any request goes out."""
    from ragserve.bench.workload import Dataset

    lengths = token_range(input_len), token_range(output_len)
    try:
        return Dataset(name, *lengths, prefix_len, prefix_groups, max_prompt, max_total)
    except ValueError as error:
        raise typer.BadParameter(f"unknown --dataset-name {name!r}") from error


def random_text(tokenizer: str, seed: int) -> "RandomText":
    """Prompt text from a tokenizer given as a model name or folder."""
    import random

    from transformers import AutoTokenizer

    from ragserve.bench.workload import RandomText
    from ragserve.engine.loader import resolve_model

    folder = Path(tokenizer) if Path(tokenizer).is_dir() else resolve_model(tokenizer)
    return RandomText(AutoTokenizer.from_pretrained(folder), random.Random(seed))


# A JSON object whose string field can run to any length: a constrained request still
# generates about the tokens it asks for (EOS is ignored), so runs compare like with like.
CONSTRAINED_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "note",
        "schema": {
            "type": "object",
            "properties": {"topic": {"type": "string"}, "note": {"type": "string"}},
            "required": ["topic", "note"],
        },
    },
}


def completion_jobs(
    url: str,
    keys: list[str],
    model: str | None,
    dataset: "Dataset",
    tokenizer: str,
    seed: int,
    constrained_share: float = 0.0,
    temperature: float = 0.0,
) -> tuple[JobMaker, str]:
    """Streamed /v1/completions jobs of the dataset, round-robin over the keys, and the model
    they ask for (the server's first when model is None), sampled at temperature;
    constrained_share of them, spread evenly, must answer in JSON (CONSTRAINED_FORMAT)."""
    from ragserve.bench.client import completion
    from ragserve.bench.workload import RequestSpec

    if not 0 <= constrained_share <= 1:
        raise typer.BadParameter("--constrained-share must be within [0, 1]")
    served = first_model(url, keys[0]) if model is None else model
    text = random_text(tokenizer, seed)

    def job(spec: RequestSpec, n: int) -> "Job":
        key, user = caller(keys, n)
        constrained = int((n + 1) * constrained_share) > int(n * constrained_share)
        extra = {"response_format": CONSTRAINED_FORMAT} if constrained else {}
        return lambda client, cancel_after: completion(
            client,
            served,
            spec.prompt,
            spec.output_tokens,
            key,
            user,
            cancel_after,
            extra,
            temperature,
        )

    def make_jobs(run_seed: int, count: int) -> list[tuple["Job", int]]:
        text.rng.seed(run_seed)
        specs = dataset.requests(text, count)
        return [(job(spec, n), spec.output_tokens) for n, spec in enumerate(specs)]

    return make_jobs, served


def first_model(url: str, key: str) -> str:
    """The id of the first model the server lists; a clear error when it cannot be asked."""
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(f"{url}/v1/models", headers=headers, timeout=30)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as error:
        raise typer.BadParameter(f"cannot list the models of {url}: {error}") from error


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
    from ragserve.reports import run_metadata

    report = {"meta": run_metadata(title=kind, **meta), "runs": runs}
    show_report(report, to_markdown(report), write(report, out, name), as_json)


def show_report(report: dict, markdown: str, paths: list[Path], as_json: bool) -> None:
    """Print the report (JSON, or its Markdown without the closing Run section) and where it
    was written."""
    from ragserve.reports import to_json

    if as_json:
        print(to_json(report))
    else:
        Console().print(Markdown(markdown.split("\n## Run")[0]))
        Console(stderr=True).print("reports: " + ", ".join(str(p) for p in paths))
