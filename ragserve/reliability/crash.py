"""Kill -9 during ingestion: does every document reported stored survive whole?

A child process runs `ragserve ingest --jsonl` over a generated corpus and is killed with
SIGKILL at a random moment after it starts storing. After each kill the store is opened again
and checked: every document the child reported stored is there, whole (its chunk count, the
text of every chunk found by full-text search, an embedding for every chunk, its ACL, the
version reported), no other document is visible in part, the index version counts exactly the
committed writes (one audit entry each), and an SQLite file passes its integrity check. Each
round re-ingests the whole corpus, so later kills land in re-ingests of stored documents too.
A last, uninterrupted run must complete and embed only the chunks that never got stored.
"""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ragserve.audit import MAX_AUDIT_PAGE, AuditAction
from ragserve.rag.documents import AccessFilter, Acl, DocumentRecord
from ragserve.rag.ingest import default_doc_id
from ragserve.rag.parsers import parse_bytes
from ragserve.reports import markdown_table, run_section, write_report
from ragserve.services import DocumentIndex
from ragserve.settings import Settings
from ragserve.sqlite_db import check_integrity

TENANT = "crash"
OWNER = "admin"
GROUP = "crash-readers"
WORDS = [
    "river",
    "mountain",
    "ledger",
    "harbour",
    "copper",
    "lantern",
    "orchard",
    "glacier",
    "meadow",
    "signal",
    "archive",
    "quarry",
    "beacon",
    "compass",
    "furnace",
    "granary",
    "vessel",
    "canopy",
    "thicket",
    "summit",
]


@dataclass(frozen=True)
class Kill:
    """When to kill: delay_s seconds after the child reports its after_documents-th result.
    Half the rounds kill soon after a random document, while the child is writing the next
    ones; the others at a random time after the first, mostly while it embeds a batch."""

    after_documents: int
    delay_s: float


@dataclass
class Round:
    number: int
    kill: Kill
    killed: bool  # False: the child finished before its kill
    reported: int  # documents it reported stored
    problems: list[str] = field(default_factory=list)


@dataclass
class CrashReport:
    store: str
    documents: int
    chunks: int
    rounds: list[Round] = field(default_factory=list)
    final_embedded: int = 0
    expected_embedded: int = 0
    final_problems: list[str] = field(default_factory=list)

    @property
    def kills(self) -> int:
        return sum(r.killed for r in self.rounds)

    @property
    def survived(self) -> int:
        return sum(r.killed and not r.problems for r in self.rounds)

    @property
    def lost(self) -> int:
        """Documents reported stored, then missing or damaged after a kill."""
        return sum(len(r.problems) for r in self.rounds)

    @property
    def passed(self) -> bool:
        return self.lost == 0 and not self.final_problems

    def as_json(self) -> dict:
        return asdict(self) | {"kills": self.kills, "survived": self.survived, "lost": self.lost}


def write_corpus(folder: Path, documents: int, seed: int) -> dict[str, str]:
    """Text files of one to five paragraphs whose words all carry the document's number, so a
    full-text search for its words finds every chunk of it and nothing else (a chunk cut
    inside a word still holds whole ones). Returns {source path: that search}."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    searches = {}
    for i in range(documents):
        words = [f"{word}{i:05d}" for word in WORDS]
        paragraphs = [
            " ".join(
                " ".join(rng.choices(words, k=rng.randint(6, 14))).capitalize() + "."
                for _ in range(rng.randint(3, 8))
            )
            for _ in range(rng.randint(1, 5))
        ]
        path = folder / f"doc-{i:05d}.txt"
        path.write_text("\n\n".join(paragraphs) + "\n")
        searches[str(path)] = " ".join(words)
    return searches


class CrashCheck:
    """The expectations for a corpus, and the checks of a store against them."""

    def __init__(self, index: DocumentIndex, searches: dict[str, str], sqlite_file: Path | None):
        self.index = index
        self.sqlite_file = sqlite_file
        self.access = AccessFilter(TENANT, "crash-check", everything=True)
        self.expected_chunks = {
            default_doc_id(TENANT, OWNER, source): len(
                index.ingestor.chunker.split(parse_bytes(Path(source).read_bytes(), source))
            )
            for source in searches
        }
        self.doc_searches = {
            default_doc_id(TENANT, OWNER, source): search for source, search in searches.items()
        }

    def problems(self, reported: list[dict]) -> list[str]:
        """What is wrong with the store now; one line per damaged or lost document."""
        store = self.index.store
        found = []
        if self.sqlite_file is not None:
            try:
                check_integrity(self.sqlite_file)
            except ValueError as error:
                return [str(error)]
        stored = {d.doc_id: d for d in store.list_documents(self.access)}
        for line in reported:
            document = stored.get(line["doc_id"])
            if document is None:
                found.append(f"{line['doc_id']}: reported stored as v{line['version']}, missing")
            elif document.version < line["version"]:
                found.append(f"{line['doc_id']}: v{document.version} < reported v{line['version']}")
        for doc_id, document in stored.items():
            found += [f"{doc_id}: {problem}" for problem in self._damage(doc_id, document)]
        writes = self._write_entries()
        counter = int(store.index_version().rsplit(":", 1)[1])
        if counter != writes:
            found.append(f"index version {counter} != {writes} committed writes in the audit")
        return found

    def _damage(self, doc_id: str, document: DocumentRecord) -> list[str]:
        store = self.index.store
        expected = self.expected_chunks.get(doc_id)
        if expected is None:
            return ["not a document of the corpus"]
        damage = []
        if document.num_chunks != expected:
            damage.append(f"{document.num_chunks} chunks, not {expected}")
        if document.acl != Acl.of(groups=[GROUP]):
            damage.append(f"ACL {document.acl.as_json()}")
        hits = store.keyword_search(self.access, self.doc_searches[doc_id], expected + 10)
        if sorted(h.index for h in hits) != list(range(expected)) or any(
            h.doc_id != doc_id for h in hits
        ):
            damage.append(f"full-text search finds chunks {sorted(h.index for h in hits)}")
        vectors = store.chunk_embeddings(TENANT, doc_id)
        norms = [float(np.linalg.norm(v)) for v in vectors.values()]
        if len(vectors) != expected or not all(abs(n - 1) < 1e-3 for n in norms):
            damage.append(f"{len(vectors)} embeddings for {expected} chunks")
        return damage

    def _write_entries(self) -> int:
        count, before = 0, None
        while page := self.index.store.audit_log(TENANT, MAX_AUDIT_PAGE, before):
            count += sum(e.action is AuditAction.DOCUMENT_WRITE for e in page)
            before = page[-1].at
        return count


def run_child(
    files: list[Path], settings: Settings, kill: Kill | None, log: Path
) -> tuple[list[dict], bool]:
    """Run `ragserve ingest --jsonl` on the files and kill it as planned (None: let it finish),
    its messages appended to log. Returns the documents it reported stored, and whether it
    was killed."""
    command = [sys.executable, "-m", "ragserve", "ingest", *map(str, files), "--jsonl"]
    command += ["--tenant", TENANT, "--owner", OWNER, "--group", GROUP]
    command += ["--data-dir", str(settings.data_dir), "--store", settings.store_url]
    with log.open("a") as messages:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=messages, text=True)
    assert child.stdout is not None
    reported: list[dict] = []
    reached = threading.Event()

    def read() -> None:
        for line in child.stdout:  # type: ignore[union-attr]
            reported.append(json.loads(line))
            if kill is not None and len(reported) >= kill.after_documents:
                reached.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    killed = False
    if kill is not None:
        while not reached.wait(0.05) and child.poll() is None:
            pass
        deadline = time.monotonic() + kill.delay_s
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            killed = True
    child.wait()
    reader.join()
    return [r for r in reported if r["error"] is None], killed


def run(
    settings: Settings,
    work: Path,
    kills: int,
    documents: int,
    max_delay_s: float,
    seed: int,
    progress: Callable[[str], None] = lambda _: None,
) -> CrashReport:
    rng = random.Random(seed)
    searches = write_corpus(work / "corpus", documents, seed)
    index = DocumentIndex.open(settings)
    url = settings.store_url
    sqlite_file = None if url.startswith(("postgresql://", "postgres://")) else Path(url)
    check = CrashCheck(index, searches, sqlite_file)
    report = CrashReport(
        store="postgresql" if sqlite_file is None else "sqlite",
        documents=documents,
        chunks=sum(check.expected_chunks.values()),
    )
    files = sorted(Path(source) for source in searches)
    attempts = 0
    while report.kills < kills and attempts < 3 * kills:
        attempts += 1
        # Each round takes a longer head of the corpus: it re-ingests what earlier rounds
        # stored and adds new documents, so the last run still has some never stored.
        head = files[: max(2, documents * min(attempts, kills) // (kills + 1))]
        if attempts % 2:
            kill = Kill(1, round(rng.uniform(0, max_delay_s), 3))
        else:
            kill = Kill(rng.randrange(1, len(head)), round(rng.uniform(0, 0.05), 3))
        reported, killed = run_child(head, settings, kill, work / "ingest.log")
        problems = check.problems(reported)
        report.rounds.append(Round(attempts, kill, killed, len(reported), problems))
        progress(f"kill {report.kills}/{kills}: {len(reported)} stored, {len(problems)} problems")
    before_final = {d.doc_id for d in index.store.list_documents(check.access)}
    final, _ = run_child(files, settings, None, work / "ingest.log")
    report.final_embedded = sum(r["embedded"] for r in final)
    report.expected_embedded = sum(
        n for doc_id, n in check.expected_chunks.items() if doc_id not in before_final
    )
    report.final_problems = check.problems(final)
    if len(final) != documents:
        report.final_problems.append(f"the last run stored {len(final)} of {documents}")
    if report.final_embedded != report.expected_embedded:
        report.final_problems.append(
            f"the last run embedded {report.final_embedded} chunks, "
            f"not the {report.expected_embedded} never stored"
        )
    index.store.close()
    return report


def to_markdown(report: CrashReport, meta: dict) -> str:
    rows = [
        [
            r.number,
            f"{r.kill.delay_s} s after document {r.kill.after_documents}",
            "killed" if r.killed else "finished first",
            r.reported,
            len(r.problems),
        ]
        for r in report.rounds
    ]
    problems = [p for r in report.rounds for p in r.problems] + report.final_problems
    return "\n".join(
        [
            f"# Kill -9 during ingestion ({report.store})",
            "",
            f"{report.documents} documents ({report.chunks} chunks). Kills survived: "
            f"**{report.survived} / {report.kills}**; documents lost: **{report.lost}**. "
            f"Last, uninterrupted run: embedded {report.final_embedded} chunks, "
            f"{report.expected_embedded} were never stored; "
            + ("all checks passed." if report.passed else "**FAILED**."),
            "",
            markdown_table(
                ["round", "kill planned", "end", "reported stored", "problems"],
                rows,
            ),
            "",
            *(f"- {p}" for p in problems[:50]),
            "",
            run_section(meta),
        ]
    )


def write(report: CrashReport, out: Path, meta: dict) -> list[Path]:
    name = f"crash-{report.store}"
    return write_report(out, name, report.as_json() | {"meta": meta}, to_markdown(report, meta))
