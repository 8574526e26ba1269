"""`ragserve capacity`: what one replica holds and how many a request rate needs, from a
measured (or saved) engine profile and a workload's token lengths (bench/capacity.py)."""

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ragserve.bench.capacity import CapacityPlan, EngineProfile, plan, workload_lengths
from ragserve.bench.measures import Slo
from ragserve.cli.common import app, console
from ragserve.cli.options import (
    ConfigOption,
    DatasetNameOption,
    InputLenOption,
    JsonOption,
    MaxPromptOption,
    MaxTotalOption,
    OutputLenOption,
    PrefixGroupsOption,
    PrefixLenOption,
    SloOption,
    TokenizerOption,
    workload_options,
)
from ragserve.engine.config import DEFAULT_MODEL


def measured_profile(config: Path | None, context: int, batches: str) -> EngineProfile:
    from ragserve.bench.capacity_profile import measure_profile
    from ragserve.services import build_engine
    from ragserve.settings import Settings

    sizes = tuple(sorted({int(b) for b in batches.split(",")}))
    with console.status("measuring the engine (prefill rate, decode step by batch size)"):
        return measure_profile(build_engine(Settings.load(config)), sizes, context)


def plan_table(result: CapacityPlan) -> Table:
    """Powers of two, the best point and the pool's limit; the JSON report has every point."""
    table = Table("concurrency", "req/s", "out tok/s", "prefill share", "TTFT ms", "TPOT ms")
    best = result.best.concurrency if result.best else None
    powers = {2**k for k in range(result.kv_concurrency.bit_length())}
    shown = {best, result.kv_concurrency} | powers
    for p in result.points:
        if p.concurrency not in shown:
            continue
        mark = " ←" if p.concurrency == best else ""
        table.add_row(
            f"{p.concurrency}{mark}",
            f"{p.requests_per_s:.3f}",
            f"{p.output_tokens_per_s:.1f}",
            f"{p.prefill_share:.0%}",
            f"{p.ttft_s * 1000:.0f}",
            f"{p.tpot_s * 1000:.1f}",
        )
    return table


@app.command()
def capacity(
    profile: Annotated[
        Path | None, typer.Option(help="A saved profile (JSON); default: measure one now.")
    ] = None,
    save_profile: Annotated[
        Path | None, typer.Option(help="Write the measured profile here for later runs.")
    ] = None,
    target_rate: Annotated[
        float | None, typer.Option(help="Requests per second to plan replicas for.")
    ] = None,
    slo: SloOption = None,
    context: Annotated[
        int | None,
        typer.Option(help="Context per sequence while profiling (default: the workload's mean)."),
    ] = None,
    batches: Annotated[str, typer.Option(help="Batch sizes to profile.")] = "1,2,4,8,16,32",
    dataset_name: DatasetNameOption = "sharegpt",
    input_len: InputLenOption = "128-512",
    output_len: OutputLenOption = "32-256",
    prefix_len: PrefixLenOption = 512,
    prefix_groups: PrefixGroupsOption = 4,
    max_prompt: MaxPromptOption = 1024,
    max_total: MaxTotalOption = 2048,
    tokenizer: TokenizerOption = DEFAULT_MODEL,
    seed: int = 0,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """The concurrency one replica holds, its throughput and latencies at each concurrency, the
    best point within the SLOs, and the replicas a target request rate needs."""
    try:
        objectives = Slo.parse(slo or [])
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
    lengths = workload_lengths(workload, seed)
    if profile is not None:
        try:
            measured = EngineProfile.from_json(json.loads(profile.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise typer.BadParameter(f"cannot read the profile {profile}: {error}") from error
    else:
        # Decode steps are profiled at the context a request of the workload holds on average.
        resident = round(lengths.prompt + lengths.output / 2)
        measured = measured_profile(config, context or resident, batches)
    if save_profile is not None:
        save_profile.write_text(json.dumps(measured.as_json(), indent=2) + "\n")
    try:
        result = plan(measured, lengths, objectives, target_rate)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    if as_json:
        report = {"profile": measured.as_json(), "lengths": lengths.__dict__}
        print(json.dumps(report | {"plan": result.as_json()}))
        return
    console.print(
        f"{measured.model} ({measured.dtype}): KV pool {measured.kv_tokens} tokens "
        f"({measured.kv_bytes_per_token} bytes each), prefill {measured.prefill_tokens_per_s:.0f}"
        f" tok/s, decode steps at {measured.context_tokens} tokens of context"
    )
    console.print(
        f"workload {workload.dataset.describe()}: mean prompt {lengths.prompt:.0f}, output "
        f"{lengths.output:.0f} tokens; the pool holds {result.kv_concurrency} at once"
    )
    console.print(plan_table(result))
    if result.best is None:
        console.print("[red]no concurrency meets the SLOs on one replica[/red]")
        raise typer.Exit(1)
    best = result.best
    console.print(
        f"best within the SLOs: {best.concurrency} in flight, {best.requests_per_s:.3f} req/s, "
        f"{best.output_tokens_per_s:.1f} output tok/s per replica"
    )
    if result.replicas is not None:
        console.print(f"{target_rate} req/s needs {result.replicas} replica(s)")
