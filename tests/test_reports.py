import json
import math
from pathlib import Path

from ragserve.reports import (
    MACHINE_FLAGS,
    markdown_table,
    run_metadata,
    run_section,
    summary,
    to_json,
    write_report,
)


def test_reports_are_strict_json():
    report = {"p99": math.nan, "rate": math.inf, "rows": [1.5, math.nan], "ok": True}
    assert json.loads(to_json(report)) == {
        "p99": None,
        "rate": None,
        "rows": [1.5, None],
        "ok": True,
    }


def test_summary_of_nothing_is_nan_not_an_error():
    assert all(math.isnan(v) for v in summary([]).values())
    assert summary([1.0, 2.0, 3.0])["p50"] == 2.0


def test_write_report_writes_json_markdown_and_plots(tmp_path):
    def line(figure) -> None:
        figure.subplots().plot([0, 1], [0, 1])

    markdown = "# Title\n\n" + markdown_table(["a", "b"], [[1, 0.5]])
    paths = write_report(tmp_path, "r", {"x": math.nan}, markdown, {"line": line})
    assert [p.name for p in paths] == ["r.json", "r.md", "r-line.png"]
    assert json.loads(paths[0].read_text()) == {"x": None}
    assert "| 1 | 0.500 |" in paths[1].read_text() and "r-line.png" in paths[1].read_text()


def test_every_report_names_the_machine_it_ran_on():
    meta = run_metadata(title="t")
    machine = meta["machine"]
    cpuinfo = Path("/proc/cpuinfo").read_text()
    flags = cpuinfo.split("flags", 1)[1].split("\n", 1)[0].split()
    assert machine["instructions"] == [f for f in MACHINE_FLAGS if f in flags]
    assert machine["cpu"] and machine["cpus"] >= 1 and machine["memory_gib"] > 0
    assert machine["cpu"] in run_section(meta)
    assert machine["kernels_isa"] == "native" and machine["torch_isa"]


def test_a_run_held_to_avx2_says_so_and_still_names_what_the_cpu_has(monkeypatch):
    from ragserve.engine import config

    monkeypatch.setenv("RAGSERVE_CPU_ISA", "avx2")
    machine = run_metadata()["machine"]
    assert machine["kernels_isa"] == "avx2"
    assert machine["instructions"] == [f for f in MACHINE_FLAGS if f in config.machine_flags()]
