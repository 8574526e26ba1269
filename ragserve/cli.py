"""The `ragserve` command line."""

import json
import logging
from typing import Annotated

import typer
from rich.console import Console

from ragserve.bench.cli import bench_app
from ragserve.engine.config import DEFAULT_MODEL

app = typer.Typer(no_args_is_help=True, help="ragserve: LLM serving with permission-aware RAG.")
app.add_typer(bench_app, name="bench")
console = Console()


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@app.command()
def generate(
    prompt: str,
    max_tokens: Annotated[int, typer.Option(help="Most tokens to generate.")] = 64,
    temperature: Annotated[float, typer.Option(help="0 for greedy decoding.")] = 0.0,
    top_p: float = 1.0,
    top_k: int = -1,
    seed: int | None = None,
    stop: Annotated[list[str] | None, typer.Option(help="Stop string; repeatable.")] = None,
    chat: Annotated[bool, typer.Option(help="Apply the model's chat template.")] = False,
    model: str = DEFAULT_MODEL,
    dtype: str = "bfloat16",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Generate a completion for PROMPT with the offline engine."""
    from ragserve.engine.errors import EngineError
    from ragserve.engine.sampling_params import SamplingParams
    from ragserve.llm import LLM

    try:
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            seed=seed,
            stop=stop,
        )
        llm = LLM(model=model, dtype=dtype)
        messages = [{"role": "user", "content": prompt}]
        output = (llm.chat(messages, params) if chat else llm.generate(prompt, params))[0]
    except EngineError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from error
    completion = output.outputs[0]
    if as_json:
        record = {
            "model": model,
            "text": completion.text,
            "finish_reason": completion.finish_reason,
            "prompt_tokens": len(output.prompt_token_ids),
            "completion_tokens": len(completion.token_ids),
            "ttft_s": output.metrics.time_to_first_token,
        }
        print(json.dumps(record))
    else:
        console.print(completion.text)
