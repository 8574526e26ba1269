"""`ragserve eval ...` commands: each writes JSON, Markdown and PNG reports and prints a summary
(or the JSON report with --json)."""

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from ragserve.cli.common import err_console, load_settings, show_report
from ragserve.cli.options import (
    ConfigOption,
    CorpusLimitOption,
    CorpusOption,
    JsonReportOption,
    OutOption,
    QuestionsOption,
)
from ragserve.cli.reliability import crash, races, sync_crash
from ragserve.engine.client import generator

eval_app = typer.Typer(no_args_is_help=True, help="Evaluation of retrieval, answers and safety.")


def _open(settings, dataset: Path, corpus: str, corpus_limit: int | None, index: bool = True):
    from ragserve.eval.context import EvalContext
    from ragserve.eval.corpus import CorpusError
    from ragserve.eval.dataset import DatasetError

    with err_console.status("loading the dataset and the corpus index") as status:

        def progress(done: int, total: int) -> None:
            status.update(f"indexing the corpus: {done}/{total} documents")

        try:
            context = EvalContext.open(settings, dataset, corpus, corpus_limit, progress)
            if index:
                context.open_index()  # under the progress display
            return context
        except (DatasetError, CorpusError, ValueError) as error:
            err_console.print(f"[red]error:[/red] {error}")
            raise typer.Exit(2) from error


def _schema(path: Path | None) -> str | None:
    """The schema file's JSON, checked to compile; exit 2 with the reason when it does not."""
    if path is None:
        return None
    from ragserve.engine.errors import InvalidRequestError
    from ragserve.engine.structured import OutputConstraint, checked_grammar

    try:
        text = path.read_text()
        checked_grammar(OutputConstraint("json", text))
    except (OSError, InvalidRequestError) as error:
        err_console.print(f"[red]error:[/red] --schema: {error}")
        raise typer.Exit(2) from error
    return text


def _rerankers(names: str, runner_tokenizer: Callable[[], object]) -> dict:
    from ragserve.rag.rerank import CrossEncoderReranker, LLMReranker

    rerankers = {}
    for name in filter(None, (n.strip() for n in names.split(","))):
        if name == "none":
            continue
        if name == "llm":
            rerankers["llm"] = LLMReranker(runner_tokenizer())
        else:
            try:
                rerankers[Path(name).name] = CrossEncoderReranker(name)
            except ValueError as error:
                err_console.print(f"[red]error:[/red] {error}")
                raise typer.Exit(2) from error
    return rerankers


def retrieval(
    dataset: QuestionsOption,
    corpus: CorpusOption = "wiki",
    corpus_limit: CorpusLimitOption = None,
    rerankers: Annotated[
        str, typer.Option(help="Comma-separated: llm, a CrossEncoder folder, or none.")
    ] = "llm",
    config: ConfigOption = None,
    out: OutOption = Path("reports/eval"),
    as_json: JsonReportOption = False,
) -> None:
    """Recall@1/5/10, MRR and nDCG@10 of the gold document for BM25, dense, hybrid, reranked."""
    from contextlib import nullcontext

    from ragserve.eval import retrieval as evaluation
    from ragserve.services import running_engine

    settings = load_settings(config)
    context = _open(settings, dataset, corpus, corpus_limit)
    needs_model = any(n.strip() == "llm" for n in rerankers.split(","))
    with running_engine(settings) if needs_model else nullcontext() as runner:
        chosen = _rerankers(rerankers, lambda: runner.engine.tokenizer)
        generate = generator(runner, "eval", "eval", "rerank") if runner else None
        with err_console.status("retrieving") as status:
            report = evaluation.evaluate(context, chosen, generate, status.update)
    context.close()
    paths = evaluation.write(report, out)
    show_report(report, evaluation.to_markdown(report), paths, as_json)


def answers(
    dataset: QuestionsOption,
    corpus: CorpusOption = "wiki",
    corpus_limit: CorpusLimitOption = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N questions.")] = None,
    variant: Annotated[
        str,
        typer.Option(
            help="Ablation: sentences, strict, fallback, one-sentence, no-history or full "
            "(the product's path)."
        ),
    ] = "full",
    style: Annotated[
        str | None,
        typer.Option(help="Answer style: quote, generate or auto (default: the setting)."),
    ] = None,
    schema: Annotated[
        Path | None,
        typer.Option(
            help="A JSON schema file: schema answers (response_format), checked by value."
        ),
    ] = None,
    config: ConfigOption = None,
    out: OutOption = Path("reports/eval"),
    as_json: JsonReportOption = False,
) -> None:
    """Correctness, support, ALCE citation precision/recall, refusals, latency and tokens."""
    import asyncio

    from ragserve.eval import answers as evaluation
    from ragserve.eval.support import SupportJudge
    from ragserve.services import running_engine

    if variant not in evaluation.VARIANTS:
        err_console.print(f"[red]error:[/red] --variant: one of {', '.join(evaluation.VARIANTS)}")
        raise typer.Exit(2)
    if style not in (None, "quote", "generate", "auto"):
        err_console.print("[red]error:[/red] --style: one of quote, generate, auto")
        raise typer.Exit(2)
    schema_text = _schema(schema)
    settings = load_settings(config)
    if style is not None:
        settings = settings.model_copy(update={"answer_style": style})
    context = _open(settings, dataset, corpus, corpus_limit)
    context.items = context.items[:limit] if limit else context.items
    with running_engine(settings) as runner, err_console.status("answering") as status:
        services = context.services(runner)
        outcomes = asyncio.run(
            evaluation.answer_all(
                evaluation.ablated(services.answers, variant),
                context.items,
                generator(runner, "eval", "eval", "answer"),
                lambda done: status.update(f"answering: {done}/{len(context.items)}"),
                schema_text,
                with_history=variant != "no-history",
            )
        )
        services.store.close()
    meta = context.metadata(
        concurrency=evaluation.MAX_CONCURRENT,
        support_judge="SupportJudge",
        variant=variant,
        schema=schema_text,
    )
    report = {"meta": meta} | evaluation.score(context, outcomes, SupportJudge(context.embedder))
    context.close()
    paths = evaluation.write(report, out)
    show_report(report, evaluation.to_markdown(report), paths, as_json)


def chunking(
    dataset: QuestionsOption,
    sizes: Annotated[str, typer.Option(help="Comma-separated chunk sizes in tokens.")] = (
        "64,128,256,512"
    ),
    group: Annotated[int, typer.Option(help="Consecutive articles per long document.")] = 16,
    corpus: CorpusOption = "wiki",
    corpus_limit: CorpusLimitOption = None,
    config: ConfigOption = None,
    out: OutOption = Path("reports/eval"),
    as_json: JsonReportOption = False,
) -> None:
    """Retrieval metrics and prompt token cost per chunk size, on long per-topic documents."""
    from transformers import AutoTokenizer

    from ragserve.engine.loader import resolve_model
    from ragserve.eval import chunking as evaluation

    try:
        chosen = sorted({int(s) for s in sizes.split(",")})
    except ValueError as error:
        err_console.print(f"[red]error:[/red] --sizes must be integers, got {sizes!r}")
        raise typer.Exit(2) from error
    if chosen[0] < 8 or group < 1:
        err_console.print("[red]error:[/red] chunk sizes must be at least 8, --group at least 1")
        raise typer.Exit(2)
    settings = load_settings(config)
    context = _open(settings, dataset, corpus, corpus_limit, index=False)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(settings.model))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    with err_console.status("evaluating chunk sizes") as status:
        report = evaluation.evaluate(context, chosen, group, count, status.update)
    paths = evaluation.write(report, out)
    show_report(report, evaluation.to_markdown(report), paths, as_json)


def safety(
    dataset: QuestionsOption,
    cases: Annotated[
        int, typer.Option(help="Injection cases (each asked with and without spotlighting).")
    ] = 60,
    memos: Annotated[int, typer.Option(help="Restricted memos in the access suite.")] = 12,
    timing_asks: Annotated[
        int, typer.Option(help="Asks of each kind timed for forbidden against missing refusals.")
    ] = 200,
    seed: int = 0,
    corpus: CorpusOption = "wiki",
    corpus_limit: CorpusLimitOption = None,
    config: ConfigOption = None,
    out: OutOption = Path("reports/eval"),
    as_json: JsonReportOption = False,
) -> None:
    """Injection attack success with and without spotlighting, and access-control leaks."""
    from ragserve.eval import safety as evaluation
    from ragserve.services import running_engine

    if cases < 1 or memos < 2 or timing_asks < 1:
        err_console.print(
            "[red]error:[/red] --cases and --timing-asks must be at least 1, --memos at least 2"
        )
        raise typer.Exit(2)
    settings = load_settings(config)
    context = _open(settings, dataset, corpus, corpus_limit, index=False)
    try:
        with running_engine(settings) as runner, err_console.status("running the safety suites"):
            report = evaluation.evaluate(context, runner, cases, memos, seed, timing_asks)
    except FileNotFoundError as error:
        err_console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from error
    paths = evaluation.write(report, out)
    show_report(report, evaluation.to_markdown(report), paths, as_json)


def calibrate(
    dataset: QuestionsOption,
    corpus: CorpusOption = "wiki",
    also: Annotated[
        list[str] | None,
        typer.Option(
            help="Another QA set as DATASET=CORPUS (repeatable): the fit and the folds take "
            "the union of all sets, and the figures are reported per set."
        ),
    ] = None,
    corpus_limit: CorpusLimitOption = None,
    folds: Annotated[int, typer.Option(help="Cross-validation folds.", min=2)] = 5,
    save_to: Annotated[
        Path | None,
        typer.Option(help="Write the fitted model here (e.g. ragserve/rag/answerability.json)."),
    ] = None,
    config: ConfigOption = None,
    out: OutOption = Path("reports/eval"),
    as_json: JsonReportOption = False,
) -> None:
    """Fit answerability (refuse or answer) on answerable and unanswerable questions, with
    cross-validated figures and a calibration plot."""
    from ragserve.eval import calibrate as calibration

    settings = load_settings(config)
    pairs = [(dataset, corpus)]
    for extra in also or []:
        name, separator, extra_corpus = extra.partition("=")
        if not separator or not name or not extra_corpus:
            err_console.print(f"[red]error:[/red] --also takes DATASET=CORPUS, got {extra!r}")
            raise typer.Exit(2)
        pairs.append((Path(name), extra_corpus))
    rows, metas = [], []
    for set_dataset, set_corpus in pairs:
        context = _open(settings, set_dataset, set_corpus, corpus_limit)
        with err_console.status(f"measuring answerability signals on {set_dataset}"):
            rows += calibration.measure(context)
        metas.append(context.metadata())
        context.close()
    model, figures = calibration.fit(rows, settings.reader_model, folds)
    meta = metas[0] | {"sets": metas, "folds": folds}
    report = {"meta": meta, "model": model.__dict__, "figures": figures, "signals": rows}
    if save_to is not None:
        save_to.write_text(model.to_json(fitted_on=meta, cv=figures["cv_auc"]))
    paths = calibration.write(report, out)
    show_report(report, calibration.to_markdown(report), paths, as_json)


COMMANDS = (
    ("retrieval", retrieval),
    ("answers", answers),
    ("chunking", chunking),
    ("safety", safety),
    ("calibrate", calibrate),
    ("crash", crash),
    ("sync-crash", sync_crash),
    ("races", races),
)
for name, command in COMMANDS:
    eval_app.command(name)(command)
