"""What the commands share: the root Typer app, the console and the common options."""

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(no_args_is_help=True, help="ragserve: LLM serving with permission-aware RAG.")
console = Console()

ConfigOption = Annotated[Path | None, typer.Option("--config", help="TOML settings file.")]
DataDirOption = Annotated[Path | None, typer.Option(help="Where keys and documents live.")]


StoreOption = Annotated[
    str | None, typer.Option("--store", help="Store URL (default: data_dir/index.sqlite).")
]
TenantOption = Annotated[str, typer.Option(help="The tenant the documents belong to.")]

JsonOption = Annotated[bool, typer.Option("--json")]
