"""The `ragserve` command line: the root app with its command groups."""

import logging
from typing import Annotated

import typer

from ragserve.cli import capacity, documents, model, operations
from ragserve.cli.bench import bench_app
from ragserve.cli.common import app
from ragserve.cli.documents import docs_app
from ragserve.cli.eval import eval_app
from ragserve.cli.keys import keys_app
from ragserve.cli.sources import sync_app

app.add_typer(bench_app, name="bench")
app.add_typer(eval_app, name="eval")
app.add_typer(keys_app, name="keys")
app.add_typer(docs_app, name="docs")
app.add_typer(sync_app, name="sync")
__all__ = ["app", "capacity", "documents", "model", "operations"]


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
