"""What evaluations and benchmarks share: percentiles, Markdown tables, run metadata, and writing
a report as JSON + Markdown + PNG plots into one folder."""

import hashlib
import json
import math
import os
import platform
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summary(values: Sequence[float]) -> dict[str, float]:
    """Mean and the percentiles a latency report needs."""
    return {
        "mean": float(np.mean(values)) if len(values) else float("nan"),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
    }


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def code_version() -> str:
    """The git commit the code runs from (with +dirty for local changes), else the version."""
    from ragserve import __version__

    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty=+dirty"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+{commit}" if commit else __version__


# The instruction sets the engine's kernels and oneDNN choose paths by (docs/benchmarks.md).
MACHINE_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def machine() -> dict[str, Any]:
    """What a figure was measured on: a figure from one CPU type says nothing about another."""
    import torch

    from ragserve.engine.config import cpu_isa, machine_flags

    described: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break  # the first processor's block describes them all
                name, _, value = line.partition(":")
                described[name.strip()] = value.strip()
    except OSError:
        pass
    model = described.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in described:
        model += f" (family {described['cpu family']}, model {described.get('model', '?')})"
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "cpu": model,
        "instructions": [flag for flag in MACHINE_FLAGS if flag in machine_flags()],
        # What ran, where a run held the code to fewer instructions than the CPU has
        # (RAGSERVE_CPU_ISA, ATEN_CPU_CAPABILITY; docs/operations.md).
        "kernels_isa": cpu_isa(),
        "torch_isa": torch.backends.cpu.get_cpu_capability(),
        "cpus": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1),
    }


def run_metadata(**fields: Any) -> dict[str, Any]:
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "code_version": code_version(),
        "machine": machine(),
        **fields,
    }


def _finite(value: Any) -> Any:
    """NaN and infinities as null, so the report is strict JSON (jq, JavaScript)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def to_json(report: dict, indent: int | None = None) -> str:
    return json.dumps(_finite(report), indent=indent, default=str, allow_nan=False)


def fmt(value: object) -> str:
    if isinstance(value, float):
        return "n/a" if value != value else f"{value:.3f}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def run_section(meta: dict[str, Any]) -> str:
    """A report's closing "Run" section: its metadata, without the (long) settings."""
    lines = [f"- {key}: `{json.dumps(value)}`" for key, value in meta.items() if key != "settings"]
    return "\n".join(["## Run", "", *lines, "", "Settings: in the JSON report."])


Plot = Callable[["Figure"], None]


def write_report(
    out_dir: Path, name: str, report: dict, markdown: str, plots: dict[str, Plot] | None = None
) -> list[Path]:
    """Write NAME.json, NAME.md and NAME-<plot>.png; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.json", out_dir / f"{name}.md"]
    paths[0].write_text(to_json(report, indent=2))
    images = []
    if plots:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure

        for plot_name, draw in plots.items():
            figure = Figure(figsize=(6.4, 4.0), layout="constrained")
            draw(figure)
            path = out_dir / f"{name}-{plot_name}.png"
            figure.savefig(path, dpi=100)
            images.append(path)
    pictures = "".join(f"\n![{p.stem}]({p.name})\n" for p in images)
    paths[1].write_text(markdown.rstrip() + "\n" + pictures)
    return paths + images
