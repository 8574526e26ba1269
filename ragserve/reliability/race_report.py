"""The report of a race (`ragserve eval races`): its figures, the operations by kind, the
violations and the failed requests, as JSON and Markdown."""

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragserve.reliability.race_history import (
    EXPECTED,
    READS,
    Operation,
    Outcome,
    ReaderScope,
    Violation,
)
from ragserve.reports import markdown_table, percentile, run_section, write_report

if TYPE_CHECKING:
    from ragserve.reliability.races import Race


def build(
    meta: dict[str, Any],
    race: "Race",
    violations: list[Violation],
    scopes: dict[str, ReaderScope],
    started: float,
    duration: float,
) -> dict[str, Any]:
    """The report; times in it are seconds since the race started."""
    return {
        "meta": meta,
        "summary": figures(race.history, violations, race.unmarked, duration),
        "operations": by_kind(race.history),
        "readers": {
            n: {"groups": sorted(s.groups), "same_tenant": s.same_tenant} for n, s in scopes.items()
        },
        "violations": {
            "by_kind": dict(Counter(v.kind for v in violations)),
            "first": [v.as_json(started) for v in violations[:50]],
        },
        "errors": [
            {"kind": op.kind, "actor": op.actor, "status": op.status, "error": op.error}
            for op in race.history
            if op.failed
        ][:20],
    }


def figures(
    history: list[Operation], violations: list[Violation], unmarked: int, duration: float
) -> dict[str, Any]:
    """The run's figures; it passes with no violation and no failed request."""
    reads = [op for op in history if op.kind in READS and op.outcome is Outcome.APPLIED]
    found = {
        "operations": len(history),
        "reads": len(reads),
        "texts_checked": sum(len(op.hits) for op in reads),
        # Returned texts without a marker cannot be attributed (none are expected).
        "unmarked_texts": unmarked,
        "violations": len(violations),
        "5xx": sum(op.status >= 500 for op in history),
        "no_response": sum(op.status == 0 for op in history),
        "internal_errors": sum(op.internal_error for op in history),
        "unexpected_4xx": sum(400 <= op.status < 500 and op.unexpected for op in history),
        "duration_s": round(duration, 2),
        "operations_per_s": round(len(history) / duration, 1),
    }
    failures = ("violations", "5xx", "no_response", "internal_errors", "unexpected_4xx")
    return found | {"passed": not any(found[f] for f in failures)}


def by_kind(history: list[Operation]) -> dict[str, dict[str, Any]]:
    """Per operation: how many, by outcome, and their latency."""
    table = {}
    for kind in EXPECTED:
        ops = [op for op in history if op.kind == kind]
        latencies = [(op.end - op.start) * 1000 for op in ops if op.status]
        table[kind] = {
            "count": len(ops),
            **{o.value: sum(op.outcome is o for op in ops) for o in Outcome},
            "p50_ms": percentile(latencies, 50),
            "p99_ms": percentile(latencies, 99),
        }
    return table


VIOLATION_COLUMNS = ("kind", "reader", "read", "read_span_s", "doc", "revision", "source")


def to_markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    verdict = "passed" if s["passed"] else "FAILED"
    lines = [
        "# Concurrent writers and readers",
        "",
        f"{s['operations']} operations in {s['duration_s']} s against {report['meta']['store']}"
        f": {s['violations']} violations, {s['5xx']} 5xx ({verdict}).",
        "",
        markdown_table(
            ["operation", "count", "2xx", "4xx", "5xx or none", "p50 ms", "p99 ms"],
            [
                [k, v["count"], v["applied"], v["rejected"], v["unknown"], v["p50_ms"], v["p99_ms"]]
                for k, v in report["operations"].items()
            ],
        ),
        "",
        markdown_table(["figure", "value"], [[k, v] for k, v in s.items()]),
        "",
    ]
    if report["violations"]["first"]:
        lines += [
            "## Violations (the first 20)",
            "",
            markdown_table(
                [*VIOLATION_COLUMNS, "blocked by"],
                [
                    [*(v[k] for k in VIOLATION_COLUMNS), _blocker_text(v.get("blocker"))]
                    for v in report["violations"]["first"][:20]
                ],
            ),
            "",
        ]
    if report["errors"]:
        lines += [
            "## Failed requests (the first 20)",
            "",
            markdown_table(
                ["operation", "key", "status", "response"],
                [[e["kind"], e["actor"], e["status"], e["error"][:120]] for e in report["errors"]],
            ),
            "",
        ]
    return "\n".join([*lines, run_section(report["meta"])])


def _blocker_text(blocker: dict[str, Any] | None) -> str:
    if blocker is None:
        return "never written or granted"
    return f"{blocker['kind']} by {blocker['actor']} at {blocker['span_s']}"


def write(report: dict[str, Any], out_dir: Path) -> list[Path]:
    return write_report(out_dir, "races", report, to_markdown(report))
