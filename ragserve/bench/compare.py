"""`ragserve bench compare`: one workload against several OpenAI-compatible servers, at several
concurrencies, in rounds whose order alternates; the first server's output throughput over
each other's, per round and as the median of the rounds.

Why rounds that alternate: on shared cores a server's throughput drifts by 15-20% within an
hour (docs/benchmarks.md), so two runs minutes apart compare the hours as much as the servers.
Here every server stays up, each concurrency runs the servers back to back on the same prompts,
and the order turns round every round so no server always goes first.
"""

import statistics
from dataclasses import dataclass

from ragserve.bench.jobs import JobMaker
from ragserve.bench.load import LoadSettings
from ragserve.bench.measures import Slo
from ragserve.bench.serve import load_client, measure
from ragserve.reports import markdown_table, run_section

# What a cell keeps of each run's summary.
KEPT = (
    "requests",
    "completed",
    "output_token_throughput",
    "ttft_ms",
    "tpot_ms",
    "prompt_tokens_mean",
    "errors",
)


@dataclass(frozen=True)
class Cell:
    """One concurrency in one round: how many requests, their prompts' seed, the servers'
    order."""

    round: int
    concurrency: int
    requests: int
    seed: int
    order: tuple[str, ...]


def cells(
    names: list[str],
    concurrencies: list[int],
    rounds: int,
    requests_per_stream: int,
    min_requests: int,
    seed: int,
) -> list[Cell]:
    """The runs in the order they go out. Each cell has its own prompts (a server must not
    answer a later cell from its prefix cache); within a cell every server gets the same."""
    planned = []
    for round_number in range(1, rounds + 1):
        order = tuple(names if round_number % 2 else reversed(names))
        for concurrency in concurrencies:
            requests = max(min_requests, requests_per_stream * concurrency)
            cell_seed = seed + 1000 * round_number + concurrency
            planned.append(Cell(round_number, concurrency, requests, cell_seed, order))
    return planned


async def run(
    urls: dict[str, str],
    jobs: dict[str, JobMaker],
    planned: list[Cell],
    warmup_requests: int,
) -> list[dict]:
    """Warm every server (name: root URL) up on prompts no cell uses, then run the cells; one
    record per cell with each server's summary."""

    async def measured(name: str, seed: int, requests: int, concurrency: int) -> dict:
        async with load_client(urls[name]) as client:
            settings = LoadSettings(float("inf"), max_concurrency=concurrency, seed=seed)
            return await measure(client, jobs[name](seed, requests), settings, Slo())

    if warmup_requests:
        for name in urls:
            await measured(name, -1, warmup_requests, warmup_requests)
    records = []
    for cell in planned:
        runs = {}
        for name in cell.order:
            result = await measured(name, cell.seed, cell.requests, cell.concurrency)
            runs[name] = {key: result["summary"][key] for key in KEPT}
        records.append({**cell.__dict__, "runs": runs})
    return records


def medians(records: list[dict], names: list[str]) -> dict[int, dict]:
    """Per concurrency: each server's median throughput over the rounds, and the first server's
    ratio over each other, per round, with its median and range."""
    first, others = names[0], names[1:]
    table: dict[int, dict] = {}
    for concurrency in sorted({record["concurrency"] for record in records}):
        mine = [r["runs"] for r in records if r["concurrency"] == concurrency]
        throughput = {
            name: [runs[name]["output_token_throughput"] for runs in mine] for name in names
        }
        ratios = {
            other: [
                ours / theirs if theirs else float("inf")
                for ours, theirs in zip(throughput[first], throughput[other], strict=True)
            ]
            for other in others
        }
        table[concurrency] = {
            "throughput": {name: statistics.median(values) for name, values in throughput.items()},
            "ratio": {
                other: {
                    "median": statistics.median(values),
                    "low": min(values),
                    "high": max(values),
                }
                for other, values in ratios.items()
            },
        }
    return table


def to_markdown(report: dict) -> str:
    names = report["meta"]["servers"]
    first, others = names[0], names[1:]
    headers = ["streams", "round", *(f"{n} tok/s" for n in names)]
    headers += [f"{first} / {other}" for other in others]
    headers += ["TPOT p50 ms (" + " / ".join(names) + ")", "done (" + " / ".join(names) + ")"]
    rows = []
    for concurrency, row in report["medians"].items():
        for record in report["cells"]:
            if record["concurrency"] != concurrency:
                continue
            runs = record["runs"]
            tok = [runs[n]["output_token_throughput"] for n in names]
            rows.append(
                [
                    concurrency,
                    record["round"],
                    *(f"{t:.1f}" for t in tok),
                    *(f"{tok[0] / t:.2f}×" if t else "n/a" for t in tok[1:]),
                    " / ".join(f"{runs[n]['tpot_ms']['p50']:.1f}" for n in names),
                    " / ".join(f"{runs[n]['completed']}/{runs[n]['requests']}" for n in names),
                ]
            )
        ratios = [row["ratio"][other] for other in others]
        rows.append(
            [
                concurrency,
                "median",
                *(f"{row['throughput'][n]:.1f}" for n in names),
                *(f"{r['median']:.2f}× ({r['low']:.2f}-{r['high']:.2f})" for r in ratios),
                "",
                "",
            ]
        )
    lines = [
        f"# {report['meta']['title']}",
        "",
        f"Workload: {report['meta']['workload']}.",
        "",
        markdown_table(headers, rows),
        "",
        run_section(report["meta"]),
    ]
    return "\n".join(lines)
