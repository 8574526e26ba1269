"""What the commands share: the root Typer app, the consoles, loading the settings, a scratch
store, and printing a report."""

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markdown import Markdown

if TYPE_CHECKING:
    from ragserve.settings import Settings

app = typer.Typer(no_args_is_help=True, help="ragserve: LLM serving with permission-aware RAG.")
console = Console()
# Progress and errors, apart from what a command prints for a pipe (a report, JSON).
err_console = Console(stderr=True)


def load_settings(config: Path | None) -> "Settings":
    """The settings; exit 2 with the reason when the file is missing or wrong."""
    from pydantic import ValidationError

    from ragserve.settings import Settings

    try:
        return Settings.load(config)
    except (FileNotFoundError, ValidationError) as error:
        err_console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from error


def scratch_store(store: str | None, pgserver_dir: Path | None) -> str | None:
    """The store a harness may fill and empty: a PostgreSQL started in pgserver_dir, else store."""
    if pgserver_dir is None:
        return store
    import pgserver

    return pgserver.get_server(pgserver_dir, cleanup_mode="stop").get_uri()


def show_report(report: dict, markdown: str, paths: list[Path], as_json: bool) -> None:
    """Print the report (JSON, or its Markdown without the closing Run section) and, on stderr,
    where it was written."""
    from ragserve.reports import to_json

    if as_json:
        print(to_json(report))
    else:
        console.print(Markdown(markdown.split("\n## Run")[0]))
    if paths:
        err_console.print("reports: " + ", ".join(str(p) for p in paths))
