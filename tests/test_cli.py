import json
import subprocess
import sys


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ragserve", *args], capture_output=True, text=True, timeout=300
    )


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
    result = run_cli("ingest", str(folder), "--group", "eng", "--tenant", "acme", *data, "--json")
    assert result.returncode == 1, "a failed file makes the exit status non-zero"
    records = {r["source"].rsplit("/", 1)[-1]: r for r in json.loads(result.stdout)}
    assert records["bees.md"]["error"] is None and records["bees.md"]["chunks"] == 1
    assert "not a readable PDF" in records["broken.pdf"]["error"]
    listed = json.loads(run_cli("docs", "list", "--tenant", "acme", *data, "--json").stdout)
    assert [d["title"] for d in listed] == ["Bees"]
    doc_id = listed[0]["id"]
    assert run_cli("docs", "list", "--tenant", "other", *data, "--json").stdout.strip() == "[]"
    changed = run_cli(
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
    deleted = run_cli("docs", "delete", doc_id, "--tenant", "acme", *data, "--json")
    assert json.loads(deleted.stdout) == {"id": doc_id, "deleted": True}
    assert run_cli("docs", "show", doc_id, "--tenant", "acme", *data).returncode == 1


def test_ask_answers_only_from_permitted_documents(tmp_path):
    data = ["--data-dir", str(tmp_path / "data")]
    memo = tmp_path / "memo.txt"
    memo.write_text("The Bluebird deal closes on 30 September for 120 million euros.")
    assert run_cli("ingest", str(memo), "--group", "board", *data).returncode == 0
    outsider = run_cli(
        "ask", "When does the Bluebird deal close?", "--user", "sam", *data, "--json"
    )
    assert outsider.returncode == 0, outsider.stderr
    record = json.loads(outsider.stdout)
    assert record["refused"] and record["citations"] == []
    assert "September" not in outsider.stdout
    assert run_cli("ask", "anything", *data).returncode == 2


def test_backup_restore_and_audit_commands(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "owls.md").write_text("# Owls\n\nOwls hunt at night.\n")
    data = ["--data-dir", str(tmp_path / "data")]
    assert run_cli("ingest", str(folder), "--group", "eng", *data, "--json").returncode == 0
    assert run_cli("keys", "create", "--user", "ann", *data, "--json").returncode == 0
    backed_up = run_cli("backup", str(tmp_path / "backup"), *data, "--json")
    assert backed_up.returncode == 0, backed_up.stderr
    assert set(json.loads(backed_up.stdout)["files"]) == {"index.sqlite", "keys.sqlite"}
    assert run_cli("backup", str(tmp_path / "backup"), *data).returncode == 2, "never overwrites"
    doc_id = json.loads(run_cli("docs", "list", *data, "--json").stdout)[0]["id"]
    assert run_cli("docs", "delete", doc_id, *data).returncode == 0

    restored = run_cli("restore", str(tmp_path / "backup"), *data, "--json")
    assert restored.returncode == 0, restored.stderr
    audit = json.loads(run_cli("audit", *data, "--json").stdout)
    assert [(e["action"], e["target"]) for e in audit][2:] == [
        ("document.delete", doc_id),
        ("key.create", "1"),
        ("document.write", doc_id),
    ], "the restore undid the delete, not its record"
    assert [(e["action"], e["actor"]) for e in audit][:2] == [("store.restore", "operator")] * 2
    shown = json.loads(run_cli("docs", "show", doc_id, *data, "--json").stdout)
    assert shown[0]["acl"] == {"users": {}, "groups": {"eng": "read"}}
    assert run_cli("restore", str(tmp_path / "nothing"), *data).returncode == 2
