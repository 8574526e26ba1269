"""`ragserve serve` as a user starts it: a real process, a config file, a key from the CLI."""

import json
import socket
import subprocess
import sys
import time

import httpx
import openai


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_with_a_cli_key(tmp_path):
    port = free_port()
    config = tmp_path / "ragserve.toml"
    config.write_text(f'port = {port}\ndata_dir = "{tmp_path / "data"}"\n')
    created = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragserve",
            "keys",
            "create",
            "--user",
            "dana",
            "--config",
            str(config),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    key = json.loads(created.stdout)["key"]
    server = subprocess.Popen([sys.executable, "-m", "ragserve", "serve", "--config", str(config)])
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key)
        reply = api.chat.completions.create(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=8,
        )
        assert reply.choices[0].message.content
    finally:
        server.terminate()
        server.wait(timeout=30)
