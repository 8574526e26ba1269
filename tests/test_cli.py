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
