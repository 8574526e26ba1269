"""`ragserve bench compare`: the command around bench/compare.py."""

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from ragserve.cli.bench_load import served_model
from ragserve.cli.common import show_report
from ragserve.cli.options import (
    InputLenOption,
    JsonOption,
    OutOption,
    OutputLenOption,
    ReportNameOption,
    TemperatureOption,
    TokenizerOption,
    token_range,
)
from ragserve.engine.config import DEFAULT_MODEL


def named(items: list[str], option: str) -> dict[str, str]:
    """NAME=VALUE items as a dict, in their order."""
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise typer.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint=option)
        if name in pairs:
            raise typer.BadParameter(f"{name!r} given twice", param_hint=option)
        pairs[name] = value
    return pairs


def positive_numbers(text: str, option: str) -> list[int]:
    try:
        numbers = [int(part) for part in text.split(",")]
    except ValueError as error:
        raise typer.BadParameter(f"expected N,N,..., got {text!r}", param_hint=option) from error
    if min(numbers) < 1:
        raise typer.BadParameter("every number must be at least 1", param_hint=option)
    return numbers


def compare(
    server: Annotated[
        list[str],
        typer.Option(
            help="NAME=URL of a server's root; repeatable, two or more. The first is compared "
            "with each other."
        ),
    ],
    api_key: Annotated[
        list[str] | None,
        typer.Option("--api-key", help="NAME=KEY: the key sent to that server; repeatable."),
    ] = None,
    concurrency: Annotated[str, typer.Option(help="Streams in flight, comma-separated.")] = (
        "1,8,32"
    ),
    rounds: Annotated[int, typer.Option(help="Rounds; the servers' order turns each round.")] = 3,
    requests_per_stream: Annotated[
        int, typer.Option(help="Requests of a run per stream in flight.")
    ] = 2,
    min_requests: Annotated[int, typer.Option(help="Fewest requests of a run.")] = 4,
    warmup_requests: Annotated[
        int, typer.Option(help="Requests each server gets first, not counted (0: none).")
    ] = 4,
    input_len: InputLenOption = "200-200",
    output_len: OutputLenOption = "128-128",
    temperature: TemperatureOption = 0.0,
    tokenizer: TokenizerOption = DEFAULT_MODEL,
    seed: int = 0,
    out: OutOption = Path("reports/bench"),
    name: ReportNameOption = "compare",
    as_json: JsonOption = False,
) -> None:
    """Servers side by side on random prompts with EOS ignored: every concurrency runs each
    server back to back on the same prompts, in rounds whose order alternates; prints each
    run and the median ratio of the first server's output tok/s over each other's."""
    from ragserve.bench import compare as comparison
    from ragserve.bench.jobs import completion_jobs
    from ragserve.bench.workload import Dataset, WorkloadOptions
    from ragserve.reports import run_metadata, write_report

    urls = named(server, "--server")
    keys = named(api_key or [], "--api-key")
    if len(urls) < 2:
        raise typer.BadParameter("compare needs two servers or more", param_hint="--server")
    unknown = sorted(set(keys) - set(urls))
    if unknown:
        raise typer.BadParameter(f"no --server named {', '.join(unknown)}", param_hint="--api-key")
    if min(rounds, requests_per_stream, min_requests) < 1 or warmup_requests < 0:
        raise typer.BadParameter("--rounds and the request counts must be positive")
    concurrencies = positive_numbers(concurrency, "--concurrency")
    workload = WorkloadOptions(
        Dataset("random", token_range(input_len), token_range(output_len)), tokenizer
    )
    jobs = {}
    for n, url in urls.items():
        key = keys.get(n, "")
        model = served_model(url, key, None)
        jobs[n] = completion_jobs([key], model, workload, seed, temperature=temperature)
    names = list(urls)
    planned = comparison.cells(
        names, concurrencies, rounds, requests_per_stream, min_requests, seed
    )
    records = asyncio.run(comparison.run(urls, jobs, planned, warmup_requests))
    described = (
        f"random prompts of {input_len} tokens, {output_len} output tokens with EOS ignored, "
        f"temperature {temperature}, "
        f"streams {concurrency}, {requests_per_stream} requests per stream (at least "
        f"{min_requests}), {rounds} rounds, all sent at once up to the concurrency"
    )
    meta = run_metadata(
        title="Servers side by side",
        servers=names,
        urls=urls,
        workload=described,
        seed=seed,
    )
    report = {"meta": meta, "cells": records, "medians": comparison.medians(records, names)}
    markdown = comparison.to_markdown(report)
    show_report(report, markdown, write_report(out, name, report, markdown), as_json)
