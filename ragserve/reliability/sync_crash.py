"""Kill -9 during source syncs: does the index still converge to the source?

A folder of generated Markdown files is followed as a source (tenant "crashed"). Each round a
child process runs `ragserve sync run` and is killed with SIGKILL at a random moment: 2-5 s
after it starts, or, once a sync has run to its end before its kill, in the second half of
that sync's time (later rounds sync a few files, in about the time the process takes to start
and load the embedder, and a fixed window would miss them); between
rounds the folder changes (files edited, deleted and added) and every fifth round the ACL map
changes. After the last round one sync runs to its end, and the same folder is synced once,
uninterrupted, into tenant "clean" of the same store. The two must hold the same documents by
path: the same text, ACL and chunks, each path once.
"""

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ragserve.rag.documents import AccessFilter
from ragserve.rag.sources.acl_map import AclMap
from ragserve.rag.sources.registry import SourceConfig, SourceRegistry
from ragserve.services import DocumentIndex
from ragserve.settings import Settings


@dataclass
class SyncCrashReport:
    rounds: int
    files: int
    kills: int = 0
    # Kills that landed before the child had finished its sync.
    mid_sync_kills: int = 0
    final_documents: int = 0
    clean_documents: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems and self.final_documents == self.clean_documents

    def as_json(self) -> dict:
        return asdict(self) | {"passed": self.passed}


def write_file(folder: Path, n: int, version: int) -> None:
    words = " ".join(f"w{n}v{version}t{i}" for i in range(40))
    (folder / f"team{n % 3}").mkdir(exist_ok=True)
    (folder / f"team{n % 3}" / f"doc{n}.md").write_text(f"# Doc {n}\n\n{words}.\n")


def run(
    settings: Settings,
    workdir: Path,
    rounds: int = 20,
    files: int = 300,
    seed: int = 0,
    status: Callable[[str], None] | None = None,
) -> SyncCrashReport:
    rng = random.Random(seed)
    report = SyncCrashReport(rounds, files)
    folder = workdir / "share"
    folder.mkdir(parents=True)
    for n in range(files):
        write_file(folder, n, 0)
    rules = {"default": {"groups": ["staff"]}, "rules": [{"path": "team1/*", "groups": ["t1"]}]}
    registry = SourceRegistry(settings.sources_path)
    crashed = SourceConfig("share", str(folder), "crashed", "admin", rules)
    registry.add(crashed)
    present, next_n = set(range(files)), files
    window = (2.0, 5.0)
    for round_ in range(rounds):
        if status is not None:
            status(f"round {round_ + 1} of {rounds}")
        started = time.monotonic()
        finished = _sync(settings, crashed, kill_after_s=rng.uniform(*window))
        if finished:
            took = time.monotonic() - started
            window = (took / 2, took)
        report.kills += 1
        report.mid_sync_kills += not finished
        for n in rng.sample(sorted(present), 6):
            write_file(folder, n, round_ + 1)
        for n in rng.sample(sorted(present), 3):
            (folder / f"team{n % 3}" / f"doc{n}.md").unlink()
            present.discard(n)
        for _ in range(3):
            write_file(folder, next_n, 0)
            present.add(next_n)
            next_n += 1
        if round_ % 5 == 4:
            rules["rules"][0]["groups"] = [f"t{round_}"]
            crashed.acl_map = AclMap.from_json(rules).to_json()
            registry.update(crashed)
    if not _sync(settings, crashed):
        report.problems.append("the last sync did not finish")
    clean = SourceConfig("clean", str(folder), "clean", "admin", crashed.acl_map)
    registry.add(clean)
    if not _sync(settings, clean):
        report.problems.append("the clean sync did not finish")
    registry.close()
    synced, reference = _index(settings, "crashed"), _index(settings, "clean")
    report.final_documents, report.clean_documents = len(synced), len(reference)
    if len(reference) != len(present):
        report.problems.append(f"the clean sync holds {len(reference)} of {len(present)} files")
    for path in sorted(synced.keys() | reference.keys()):
        if synced.get(path) != reference.get(path):
            report.problems.append(f"{path}: differs from a clean sync")
    return report


def _sync(settings: Settings, source: SourceConfig, kill_after_s: float | None = None) -> bool:
    """Whether the child finished (exit 0) before any kill."""
    args = ["sync", "run", source.name, "--tenant", source.tenant]
    args += ["--data-dir", str(settings.data_dir), "--json"]
    if settings.store:
        args += ["--store", settings.store]
    child = subprocess.Popen(
        [sys.executable, "-m", "ragserve", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if kill_after_s is not None:
        deadline = time.monotonic() + kill_after_s
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if child.poll() is None:
            child.kill()
            child.wait()
            return False
    return child.wait(timeout=600) == 0


def _index(settings: Settings, tenant: str) -> dict[str, list]:
    """The tenant's documents by source path: text hash, ACL, chunk texts; a path held by
    two documents shows as a list of both."""
    index = DocumentIndex.open(settings)
    everything = AccessFilter(tenant, "operator", everything=True)
    found: dict[str, list] = {}
    try:
        for d in index.store.list_documents(everything):
            chunks = [c.text for c in index.store.document_chunks(everything, d.doc_id)]
            found.setdefault(d.source, []).append((d.content_hash, d.acl, chunks))
    finally:
        index.store.close()
    return found


def to_markdown(report: SyncCrashReport) -> str:
    verdict = "passed" if report.passed else "FAILED"
    lines = [
        f"# Kill -9 during source syncs: {verdict}",
        "",
        f"{report.rounds} rounds over {report.files} files; {report.kills} kills, "
        f"{report.mid_sync_kills} of them before the sync finished; the index after a last "
        f"sync holds {report.final_documents} documents, a clean sync "
        f"{report.clean_documents}.",
    ]
    lines += ["", *[f"- {p}" for p in report.problems[:50]]] if report.problems else []
    return "\n".join(lines) + "\n"


def write(report: SyncCrashReport, out: Path, meta: dict) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "sync-crash.json", out / "sync-crash.md"]
    paths[0].write_text(json.dumps(report.as_json() | {"run": meta}, indent=2))
    paths[1].write_text(to_markdown(report))
    return paths
