"""The command line. The generate tests run `python -m ragserve` as a user would; the rest call
the same Typer app in this process, since each new process spends seconds importing the stack."""

import json
import subprocess
import sys
import time
from dataclasses import dataclass

from typer.testing import CliRunner

from ragserve.cli import app
from ragserve.history import HistoryEntry, QueryHistory


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ragserve", *args], capture_output=True, text=True, timeout=300
    )


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run(*args: str) -> Ran:
    result = CliRunner().invoke(app, list(args))
    return Ran(result.exit_code, result.stdout, result.stderr)


def test_generate_json(llm_fp32):
    result = run_cli("generate", "The capital of France is", "--max-tokens", "8", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["completion_tokens"] <= 8
    assert record["text"] and record["finish_reason"] in ("stop", "length")


def test_generate_reports_bad_input_clearly():
    result = run_cli("generate", "hi", "--temperature", "-1")
    assert result.returncode == 2
    assert "temperature must be >= 0" in result.stdout + result.stderr


def test_ingest_and_docs_commands(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "bees.md").write_text("# Bees\n\nBees make honey from nectar.\n")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 junk")
    data = ["--data-dir", str(tmp_path / "data")]
    result = run("ingest", str(folder), "--group", "eng", "--tenant", "acme", *data, "--json")
    assert result.returncode == 1, "a failed file makes the exit status non-zero"
    records = {r["source"].rsplit("/", 1)[-1]: r for r in json.loads(result.stdout)}
    assert records["bees.md"]["error"] is None and records["bees.md"]["chunks"] == 1
    assert "not a readable PDF" in records["broken.pdf"]["error"]
    listed = json.loads(run("docs", "list", "--tenant", "acme", *data, "--json").stdout)
    assert [d["title"] for d in listed] == ["Bees"]
    doc_id = listed[0]["id"]
    assert run("docs", "list", "--tenant", "other", *data, "--json").stdout.strip() == "[]"
    changed = run(
        "docs",
        "acl",
        doc_id,
        "--user",
        "ann",
        "--group",
        "ops:write",
        "--tenant",
        "acme",
        *data,
        "--json",
    )
    assert json.loads(changed.stdout)[0]["acl"] == {
        "users": {"ann": "read"},
        "groups": {"ops": "write"},
    }
    deleted = run("docs", "delete", doc_id, "--tenant", "acme", *data, "--json")
    assert json.loads(deleted.stdout) == {"id": doc_id, "deleted": True}
    assert run("docs", "show", doc_id, "--tenant", "acme", *data).returncode == 1


def test_ask_answers_only_from_permitted_documents(tmp_path):
    data = ["--data-dir", str(tmp_path / "data")]
    memo = tmp_path / "memo.txt"
    memo.write_text("The Bluebird deal closes on 30 September for 120 million euros.")
    assert run("ingest", str(memo), "--group", "board", *data).returncode == 0
    outsider = run("ask", "When does the Bluebird deal close?", "--user", "sam", *data, "--json")
    assert outsider.returncode == 0, outsider.stderr
    record = json.loads(outsider.stdout)
    assert record["refused"] and record["citations"] == []
    assert "September" not in outsider.stdout
    assert run("ask", "anything", *data).returncode == 2


def test_ask_answers_the_same_whatever_the_asker_cannot_read(tmp_path):
    """Documents of another group, another tenant and another user's own, all about the same
    things, change nothing in an answer (text, answerability, citations) for carol."""
    data = ["--data-dir", str(tmp_path / "data")]
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "deal.txt").write_text(
        "The Bluebird deal with Globex closes on 30 September. It is worth 120 million euros."
    )
    (notes / "harvest.txt").write_text("Zorblax harvesting in the valley needs 40 workers.")
    assert run("ingest", str(notes), "--group", "staff", *data).returncode == 0
    questions = ["When does the Bluebird deal close?", "How many workers does zorblax need?"]

    def answers() -> list[dict]:
        found = []
        for question in questions:
            asked = run("ask", question, "--user", "carol", "--group", "staff", *data, "--json")
            assert asked.returncode == 0, asked.stderr
            record = json.loads(asked.stdout)
            record.pop("timings")
            record["usage"].pop("prompt_tokens_details", None)
            found.append(record)
        return found

    before = answers()
    assert not before[0]["refused"] and "30 September" in before[0]["answer"]
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "deal.txt").write_text(
        "Bluebird Bluebird deal: Globex closes the deal on 1 October for 140 million euros."
    )
    (hidden / "harvest.txt").write_text("Zorblax zorblax harvesting workers: 90 workers.")
    for scope in (["--group", "board"], ["--tenant", "beta", "--group", "staff"], []):
        assert run("ingest", str(hidden), *scope, "--owner", "dave", *data).returncode == 0
    for was, now in zip(before, answers(), strict=True):
        for field in was:
            assert now[field] == was[field], field


def test_backup_restore_and_audit_commands(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "owls.md").write_text("# Owls\n\nOwls hunt at night.\n")
    data = ["--data-dir", str(tmp_path / "data")]
    assert run("ingest", str(folder), "--group", "eng", *data, "--json").returncode == 0
    assert run("keys", "create", "--user", "ann", *data, "--json").returncode == 0
    assert run("sync", "add", "handbook", "--folder", str(folder), *data).returncode == 0
    history = QueryHistory(tmp_path / "data" / "history.sqlite", 30, identities=False)
    history.record(history_entry("before"), "ann")
    backed_up = run("backup", str(tmp_path / "backup"), *data, "--json")
    assert backed_up.returncode == 0, backed_up.stderr
    assert set(json.loads(backed_up.stdout)["files"]) == {
        "index.sqlite",
        "keys.sqlite",
        "sources.sqlite",
        "history.sqlite",
    }
    assert run("backup", str(tmp_path / "backup"), *data).returncode == 2, "never overwrites"
    doc_id = json.loads(run("docs", "list", *data, "--json").stdout)[0]["id"]
    assert run("docs", "delete", doc_id, *data).returncode == 0
    assert run("sync", "remove", "handbook", *data).returncode == 0
    history.record(history_entry("after"), "ann")

    restored = run("restore", str(tmp_path / "backup"), *data, "--json")
    assert restored.returncode == 0, restored.stderr
    audit = json.loads(run("audit", *data, "--json").stdout)
    assert [(e["action"], e["target"]) for e in audit][2:] == [
        ("document.delete", doc_id),
        ("key.create", "1"),
        ("document.write", doc_id),
    ], "the restore undid the delete, not its record"
    assert [(e["action"], e["actor"]) for e in audit][:2] == [("store.restore", "operator")] * 2
    shown = json.loads(run("docs", "show", doc_id, *data, "--json").stdout)
    assert shown[0]["acl"] == {"users": {}, "groups": {"eng": "read"}}
    sources = json.loads(run("sync", "list", *data, "--json").stdout)
    assert [source["name"] for source in sources] == ["handbook"]
    # The history open all along reads the backup's entries, and its asker still rates hers.
    assert [entry.id for entry in history.all("acme")] == ["before"]
    assert history.rate("acme", "ann", "before", "up", None, None) is not None
    assert run("restore", str(tmp_path / "nothing"), *data).returncode == 2


def history_entry(entry_id: str) -> HistoryEntry:
    return HistoryEntry(
        entry_id, "acme", "", time.time(), "Q?", [], "A.", "extractive", False, [], 5.0
    )


def counting(monkeypatch, target: str, make):
    """Replace the class at target by make(*args), counting the constructions."""
    made = []

    def construct(*args, **kwargs):
        made.append(make(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(target, construct)
    return made


def test_docs_commands_never_load_the_embedding_model(tmp_path, embedder, monkeypatch):
    from ragserve.rag.embeddings import embedding_dimension

    assert embedding_dimension("all-minilm-l6-v2") == embedder.dimension
    loaded = counting(monkeypatch, "ragserve.services.build_embedder", lambda settings: embedder)
    data = ["--data-dir", str(tmp_path / "data")]
    (tmp_path / "bees.md").write_text("# Bees\n\nBees make honey from nectar.\n")
    assert run("ingest", str(tmp_path / "bees.md"), *data).returncode == 0
    assert len(loaded) == 1, "ingesting embeds"
    loaded.clear()
    listed = run("docs", "list", *data, "--json")
    assert listed.returncode == 0, listed.stderr
    doc_id = json.loads(listed.stdout)[0]["id"]
    assert run("docs", "list", *data).returncode == 0
    assert run("docs", "show", doc_id, *data, "--json").returncode == 0
    assert run("docs", "acl", doc_id, "--group", "eng", *data, "--json").returncode == 0
    assert run("docs", "delete", doc_id, *data, "--json").returncode == 0
    assert loaded == []


def ask_setup(tmp_path, embedder, monkeypatch) -> list[str]:
    monkeypatch.setattr("ragserve.services.build_embedder", lambda settings: embedder)
    data = ["--data-dir", str(tmp_path / "data")]
    memo = tmp_path / "memo.txt"
    memo.write_text("The Bluebird deal closes on 30 September for 120 million euros.")
    assert run("ingest", str(memo), "--group", "board", *data).returncode == 0
    return ["When does the Bluebird deal close?", "--user", "bob", "--group", "board", *data]


def test_a_quoted_answer_never_builds_the_engine(tmp_path, embedder, monkeypatch):
    asked = ask_setup(tmp_path, embedder, monkeypatch)

    def refuse(*args, **kwargs):
        raise AssertionError("a quoted answer built the engine")

    built = counting(monkeypatch, "ragserve.engine.engine.LLMEngine", refuse)
    result = run("ask", *asked, "--style", "quote", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert not record["refused"] and "30 September" in record["answer"]
    assert record["citations"] and record["citations"][0]["quote"] in record["answer"]
    assert built == []
    assert "loading the model" not in result.stderr


def test_a_generated_answer_builds_the_engine_once(tmp_path, embedder, monkeypatch):
    from ragserve.engine.engine import LLMEngine
    from ragserve.services import ModelOnDemand
    from ragserve.settings import Settings

    asked = ask_setup(tmp_path, embedder, monkeypatch)
    # A small KV pool (4096 tokens of the default model in float32) keeps the test light.
    monkeypatch.setenv("RAGSERVE_KV_CACHE_MEMORY_BYTES", str(4096 * 46080))
    monkeypatch.setenv("RAGSERVE_DTYPE", "float32")
    built = counting(monkeypatch, "ragserve.engine.engine.LLMEngine", LLMEngine)
    result = run("ask", *asked, "--style", "generate", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert not record["refused"] and record["citations"]
    assert len(built) == 1
    assert "loading the model smollm2-135m-instruct..." in result.stderr
    # Prompt building's context length, read without the engine, is the engine's own.
    assert ModelOnDemand(Settings.load()).max_model_len == built[0].max_model_len == 4096


def test_the_command_line_starts_without_the_engine():
    """Importing the CLI, the package and the request types loads none of torch, transformers
    and llguidance: a command that needs no model (docs list, a quoted answer) does not pay for
    them (transformers alone took a second)."""
    heavy = ("torch", "transformers", "llguidance", "sentence_transformers")
    probe = (
        "import sys, ragserve, ragserve.cli, ragserve.engine.sampling_params;"
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    # The package still hands out the engine's names, imported when first asked for.
    from ragserve import LLM, RequestOutput, SamplingParams

    assert LLM.__name__ == "LLM" and RequestOutput.__name__ == "RequestOutput"
    assert SamplingParams(max_tokens=4).max_tokens == 4


def test_sync_commands_follow_a_folder(tmp_path):
    folder = tmp_path / "share"
    (folder / "hr").mkdir(parents=True)
    (folder / "bees.md").write_text("# Bees\n\nBees make honey from nectar.\n")
    (folder / "hr" / "pay.txt").write_text("Pay rises in April.\n")
    rules = tmp_path / "acl.json"
    rules.write_text(json.dumps({"rules": [{"path": "hr/*", "groups": ["hr"]}]}))
    data = ["--data-dir", str(tmp_path / "data")]
    added = run(
        "sync",
        "add",
        "share",
        "--folder",
        str(folder),
        "--group",
        "staff",
        "--acl-map",
        str(rules),
        "--every",
        "10m",
        *data,
    )
    assert added.returncode == 0, added.stdout
    assert run("sync", "add", "share", "--folder", str(folder), *data).returncode == 2
    assert (
        run("sync", "add", "x", "--folder", str(folder), "--every", "soon", *data).returncode == 2
    )
    first = json.loads(run("sync", "run", "share", *data, "--json").stdout)
    assert (first["added"], first["failed"]) == (2, [])
    (folder / "bees.md").unlink()
    second = json.loads(run("sync", "run", "share", *data, "--json").stdout)
    assert (second["deleted"], second["unchanged"]) == (1, 1)
    listed = json.loads(run("sync", "list", *data, "--json").stdout)
    assert listed[0]["every_s"] == 600 and listed[0]["last_report"]["deleted"] == 1
    documents = json.loads(run("docs", "list", *data, "--json").stdout)
    assert [(d["source"], d["acl"]["groups"]) for d in documents] == [
        ("hr/pay.txt", {"hr": "read"})
    ]
    rules.write_text(json.dumps({"rules": [{"path": "hr/*", "groups": ["hr", "board"]}]}))
    assert run("sync", "set", "share", "--acl-map", str(rules), *data).returncode == 0
    third = json.loads(run("sync", "run", "share", *data, "--json").stdout)
    assert (third["repermissioned"], third["embedded_chunks"]) == (1, 0)
    assert run("sync", "run", "nope", *data).returncode == 2
    assert run("sync", "remove", "share", *data).returncode == 0
    assert json.loads(run("sync", "list", *data, "--json").stdout) == []


def test_docs_versions_and_restore(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("ragserve.services.build_embedder", lambda settings: embedder)
    data = ["--data-dir", str(tmp_path / "data")]
    policy = tmp_path / "policy.md"
    policy.write_text("# Policy\n\nVisitors sign in at the front desk.\n")
    assert run("ingest", str(policy), "--group", "staff", *data).returncode == 0
    policy.write_text("# Policy\n\nVisitors sign in at the new kiosk.\n")
    assert run("ingest", str(policy), "--group", "staff", *data).returncode == 0
    doc_id = json.loads(run("docs", "list", *data, "--json").stdout)[0]["id"]
    versions = json.loads(run("docs", "versions", doc_id, *data, "--json").stdout)
    assert [(v["version"], v["current"]) for v in versions] == [(2, True), (1, False)]
    restored = run("docs", "restore", doc_id, "1", *data, "--json")
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)[0]["version"] == 3
    missing = run("docs", "restore", doc_id, "7", *data)
    assert missing.returncode == 1 and "no earlier version 7" in missing.stdout


def test_serving_moves_what_startup_loaded_out_of_the_collectors_view(monkeypatch):
    """`serve` and `demo` freeze the objects alive when serving begins: a full collection over
    them would stop every stream for a fifth of a second."""
    import gc

    import uvicorn

    from ragserve.cli.model import run_server
    from ragserve.settings import Settings

    frozen_when_serving: list[int] = []
    monkeypatch.setattr(
        uvicorn, "run", lambda *a, **k: frozen_when_serving.append(gc.get_freeze_count())
    )
    loaded = [[] for _ in range(1000)]
    assert gc.get_freeze_count() == 0
    try:
        run_server(None, Settings())
    finally:
        gc.unfreeze()
    assert frozen_when_serving and frozen_when_serving[0] >= len(loaded)
