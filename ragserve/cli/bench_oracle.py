"""`ragserve bench cache-oracle`: the command around bench/oracle.py."""

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown

from ragserve.bench.load_options import UrlOption
from ragserve.engine.config import DEFAULT_MODEL


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
    out: Annotated[Path, typer.Option(help="Report folder.")] = Path("reports/bench"),
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Can a caller confirm a guess at a document it may not read, through the prefix cache
    (cached tokens, time to first token)? Run it against a server whose answers run the model
    (answer_style = "generate"); see ragserve/bench/oracle.py."""
    from ragserve.bench.oracle import Oracle, OracleSettings, to_markdown
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
    write_report(out, "cache-oracle", report, to_markdown(report))
    if as_json:
        print(json.dumps(report))
    else:
        Console().print(Markdown(to_markdown(report)))
