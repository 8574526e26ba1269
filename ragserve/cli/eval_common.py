"""What the `ragserve eval ...` commands share: the Typer app, the console, the common options,
loading the settings and printing a report."""

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown

from ragserve.reports import to_json

eval_app = typer.Typer(no_args_is_help=True, help="Evaluation of retrieval, answers and safety.")
console = Console(stderr=True)

ConfigOption = Annotated[Path | None, typer.Option("--config", help="TOML settings file.")]
OutOption = Annotated[Path, typer.Option(help="Report folder.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the JSON report.")]
StoreOption = Annotated[
    str | None,
    typer.Option(help="A scratch postgresql:// URL or SQLite path; default a temporary file."),
]
PgserverOption = Annotated[
    Path | None, typer.Option(help="Start a PostgreSQL (pgserver) in this folder and use it.")
]


def load_settings(config: Path | None):
    from pydantic import ValidationError

    from ragserve.settings import Settings

    try:
        return Settings.load(config)
    except (FileNotFoundError, ValidationError) as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from error


def scratch_store(store: str | None, pgserver_dir: Path | None) -> str | None:
    if pgserver_dir is None:
        return store
    import pgserver

    return pgserver.get_server(pgserver_dir, cleanup_mode="stop").get_uri()


def finish(report: dict, markdown: str, paths: list[Path], as_json: bool) -> None:
    if as_json:
        print(to_json(report))
    else:
        Console().print(Markdown(markdown.split("\n## Run")[0]))
    console.print("reports: " + ", ".join(str(p) for p in paths))
