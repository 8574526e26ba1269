"""`ragserve bench sync`: a folder of N files in mixed formats (Markdown, text, HTML, Word)
followed as a source. The first sync's throughput; then 1% of the files edited, 0.5% deleted,
0.5% added and one ACL-map rule changed, and the re-sync's wall time against the first's, its
counts against what was done, the chunks it embedded against the chunks whose text changed,
and every document's ACL against the map."""

import random
import tempfile
from pathlib import Path
from typing import Any

from ragserve.rag.documents import AccessFilter
from ragserve.rag.sources.acl_map import AclMap
from ragserve.rag.sources.registry import SourceConfig, SourceRegistry
from ragserve.rag.sources.sync import SourceSync, source_doc_id
from ragserve.reports import markdown_table
from ragserve.services import DocumentIndex
from ragserve.settings import Settings

TEAMS = ("sales", "hr", "eng", "ops")
KINDS = (".md", ".txt", ".html", ".docx")
VOCABULARY = [
    "budget",
    "invoice",
    "policy",
    "travel",
    "leave",
    "contract",
    "supplier",
    "meeting",
    "quarter",
    "report",
    "review",
    "office",
    "laptop",
    "training",
    "safety",
    "customer",
    "renewal",
    "audit",
    "payroll",
    "holiday",
    "project",
    "deadline",
    "approval",
    "expense",
    "vendor",
    "hiring",
    "warehouse",
    "shipment",
    "forecast",
    "pricing",
    "discount",
]


def write_file(root: Path, n: int, version: int) -> str:
    """File n of the folder (its kind, team and length fixed by n) at a version: a new
    version rewrites the first paragraph only. Returns its path."""
    team = TEAMS[n % len(TEAMS)]
    kind = ".docx" if n % 20 == 19 else KINDS[n % 3]
    words = [VOCABULARY[(n * 7 + i * 3) % len(VOCABULARY)] for i in range(30 + n * 37 % 90)]
    words[0] = f"{team}{n}v{version}"
    paragraphs = [" ".join(words[i : i + 40]) + "." for i in range(0, len(words), 40)]
    path = root / team / f"file{n}{kind}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == ".docx":
        import docx

        document = docx.Document()
        document.add_heading(f"File {n}", 1)
        for paragraph in paragraphs:
            document.add_paragraph(paragraph)
        document.save(str(path))
    elif kind == ".html":
        body = "".join(f"<p>{p}</p>" for p in paragraphs)
        path.write_text(f"<html><head><title>File {n}</title></head><body>{body}</body></html>")
    else:
        path.write_text(f"# File {n}\n\n" + "\n\n".join(paragraphs) + "\n")
    return path.relative_to(root).as_posix()


def run(settings: Settings, files: int, seed: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "share"
        paths = {n: write_file(root, n, 0) for n in range(files)}
        rules = {"default": {"groups": ["staff"]}, "rules": [{"path": "hr/*", "groups": ["hr"]}]}
        registry = SourceRegistry(settings.sources_path)
        source = SourceConfig("bench", str(root), "bench", "admin", rules)
        registry.add(source)
        index = DocumentIndex.open(settings)
        sync = SourceSync(index.store, index.ingestor, registry)
        first = sync.run(source)
        everything = AccessFilter("bench", "operator", everything=True)
        present = sorted(paths)
        edited = rng.sample(present, files // 100)
        gone = rng.sample(sorted(set(present) - set(edited)), files // 200)
        before = {
            n: {c.text for c in index.store.document_chunks(everything, _id(source, paths[n]))}
            for n in edited
        }
        for n in edited:
            write_file(root, n, 1)
        for n in gone:
            (root / paths[n]).unlink()
        added = {n: write_file(root, n, 0) for n in range(files, files + files // 200)}
        source.acl_map = AclMap.from_json(
            {"default": rules["default"], "rules": [{"path": "hr/*", "groups": ["hr", "board"]}]}
        ).to_json()
        registry.update(source)
        second = sync.run(source)
        changed_chunks = sum(
            sum(t not in before[n] for t in _texts(index, everything, source, paths[n]))
            for n in edited
        )
        added_chunks = sum(len(_texts(index, everything, source, p)) for p in added.values())
        acl_map = AclMap.from_json(source.acl_map)
        wrong_acl = [
            d.source
            for d in index.store.list_documents(everything)
            if d.acl != acl_map.acl_for(d.source)
        ]
        index.store.close()
        registry.close()
    untouched_hr = [
        n for n in range(files) if paths[n].startswith("hr/") and n not in gone and n not in edited
    ]
    expected = {
        "added": len(added),
        "changed": len(edited),
        "deleted": len(gone),
        "repermissioned": len(untouched_hr),
        "embedded_chunks": changed_chunks + added_chunks,
    }
    got = {key: second.as_json()[key] for key in expected}
    return {
        "files": files,
        "first_sync": first.as_json(),
        "first_chunks_per_s": round(first.embedded_chunks / first.seconds, 1),
        "resync": second.as_json(),
        "resync_share_of_first": round(second.seconds / first.seconds, 4),
        "expected": expected,
        "exact": got == expected,
        "documents_with_a_wrong_acl": wrong_acl[:20],
    }


def _id(source: SourceConfig, path: str) -> str:
    return source_doc_id(source, path)


def _texts(
    index: DocumentIndex, access: AccessFilter, source: SourceConfig, path: str
) -> list[str]:
    return [c.text for c in index.store.document_chunks(access, _id(source, path))]


def to_markdown(report: dict[str, Any]) -> str:
    first, second = report["first_sync"], report["resync"]
    rows = [
        ["first sync", first["seconds"], first["added"], 0, 0, first["embedded_chunks"]],
        [
            "re-sync",
            second["seconds"],
            second["added"],
            second["changed"],
            second["deleted"],
            second["embedded_chunks"],
        ],
    ]
    table = markdown_table(
        ["run", "seconds", "added", "changed", "deleted", "embedded chunks"], rows
    )
    return (
        f"# Folder sync, {report['files']} files\n\n{table}\n\n"
        f"First sync: {report['first_chunks_per_s']} chunks/s. Re-sync: "
        f"{report['resync_share_of_first']:.1%} of the first's time; counts exactly as done: "
        f"{report['exact']} (expected {report['expected']}); documents with a wrong ACL: "
        f"{len(report['documents_with_a_wrong_acl'])}.\n"
    )
