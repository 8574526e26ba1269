"""The options more than one command takes, each declared once (flag, type and help), and the
typed objects built from them."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from ragserve.bench.workload import WorkloadOptions

# Settings, data and stores.
ConfigOption = Annotated[Path | None, typer.Option("--config", help="TOML settings file.")]
DataDirOption = Annotated[Path | None, typer.Option(help="Where keys and documents live.")]
StoreOption = Annotated[
    str | None, typer.Option("--store", help="Store URL (default: data_dir/index.sqlite).")
]
ScratchStoreOption = Annotated[
    str | None,
    typer.Option(
        "--store", help="A scratch postgresql:// URL or SQLite path; default a temporary file."
    ),
]
PgserverOption = Annotated[
    Path | None, typer.Option(help="Start a PostgreSQL (pgserver) in this folder and use it.")
]
TenantOption = Annotated[str, typer.Option(help="The tenant the documents belong to.")]

# Reports: where a command writes them (JSON, Markdown, plots), and printing the JSON instead of
# the Markdown. The evaluations' --json says so in its help; the other commands' never has.
OutOption = Annotated[Path, typer.Option("--out", help="Report folder.")]
ReportNameOption = Annotated[str, typer.Option("--name", help="Report file name.")]
JsonOption = Annotated[bool, typer.Option("--json")]
JsonReportOption = Annotated[bool, typer.Option("--json", help="Print the JSON report.")]

# The evaluations' questions and corpus.
QuestionsOption = Annotated[
    Path, typer.Option("--dataset", help="JSONL of {qid, question, answers, gold_doc, kind}.")
]
CorpusOption = Annotated[
    str, typer.Option(help="'wiki' (the bundled Wikipedia corpus), a JSONL or a JSON file.")
]
CorpusLimitOption = Annotated[
    int | None, typer.Option(help="Index only the gold documents and others up to N in all.")
]

# A load against a running server: where, as whom, how fast, and against which objectives.
UrlOption = Annotated[str, typer.Option(help="The server's root, e.g. http://127.0.0.1:8000.")]
KeyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--api-key",
        help="An API key; repeatable: requests go round-robin over them "
        "(several users or tenants).",
    ),
]
ModelOption = Annotated[str | None, typer.Option(help="Model id (default: the server's first).")]
RateOption = Annotated[float, typer.Option(help="Requests per second (inf: all at once).")]
SweepOption = Annotated[
    str | None, typer.Option(help="Comma-separated request rates to run one after another.")
]
SloOption = Annotated[
    list[str] | None, typer.Option("--slo", help="ttft:MS, tpot:MS or e2e:MS; repeatable.")
]
CancelShareOption = Annotated[float, typer.Option(help="Share of clients that cancel mid-stream.")]
TemperatureOption = Annotated[
    float,
    typer.Option(min=0, max=2, help="Every request's sampling temperature (0: greedy), no seed."),
]

# The prompts of a completion load (WorkloadOptions).
DatasetNameOption = Annotated[str, typer.Option(help="random, sharegpt or shared-prefix.")]
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


def token_range(text: str) -> tuple[int, int]:
    """LOW-HIGH (or one number) as a pair."""
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def workload_options(
    dataset_name: str,
    input_len: str,
    output_len: str,
    prefix_len: int,
    prefix_groups: int,
    max_prompt: int,
    max_total: int,
    tokenizer: str,
) -> "WorkloadOptions":
    """The workload options as one object, checked before any request goes out."""
    from ragserve.bench.workload import Dataset, WorkloadOptions

    lengths = token_range(input_len), token_range(output_len)
    try:
        dataset = Dataset(dataset_name, *lengths, prefix_len, prefix_groups, max_prompt, max_total)
    except ValueError as error:
        raise typer.BadParameter(f"unknown --dataset-name {dataset_name!r}") from error
    return WorkloadOptions(dataset, tokenizer)
