"""A one-off measurement, not a test: hostile request bodies against a real `ragserve serve`.

    .venv/bin/python -m tests.server.measure_hostile_bodies [--seconds 10] [--json]

Starts `ragserve serve` in its own process (a writer key from `ragserve keys create`), then for
each case streams bodies at it for --seconds, back to back, each offering 1 GiB generated as it
is sent (chunked, no Content-Length), while two threads here time GET /health every 10 ms and
sample the server's resident memory every 5 ms. Reported per case: the statuses, the most the
client handed its socket before an answer (what the server read, plus socket buffers), the
server's RSS growth over its baseline, and /health's latencies during the case.

Cases: a stranger (no key) posting to /v1/chat/completions, a writer's JSON body over
max_request_bytes, a writer's multipart upload over max_upload_bytes, and for scale, a writer's
JSON document of 19 MiB (within the limit) that the route refuses after parsing it (an unknown
field), so that the parse is timed without an ingestion.
"""

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

OFFER = 1 << 30
PIECE = 1 << 20
UPLOAD_HEAD = b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n\r\n'


@dataclass
class Case:
    name: str
    path: str
    headers: dict[str, str]
    body: Callable[[], Iterator[bytes]]
    statuses: dict[int, int] = field(default_factory=dict)
    most_sent: int = 0
    requests: int = 0


def offered(head: bytes = b"", total: int = OFFER) -> Iterator[bytes]:
    """head, then spaces up to total bytes, 1 MiB at a time, made as they are sent."""
    yield head
    piece = b" " * PIECE
    for _ in range((total - len(head)) // PIECE):
        yield piece


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(folder: Path) -> Iterator[tuple[str, str, psutil.Process]]:
    """`ragserve serve` on a free port; its URL, a writer key and its process."""
    port = free_port()
    config = folder / "ragserve.toml"
    config.write_text(f'port = {port}\ndata_dir = "{folder / "data"}"\n')
    command = [sys.executable, "-m", "ragserve"]
    create = ["keys", "create", "--user", "wes", "--role", "writer", "--config", str(config)]
    created = subprocess.run(
        [*command, *create, "--json"], capture_output=True, text=True, check=True
    )
    key = json.loads(created.stdout)["key"]
    server = subprocess.Popen([*command, "serve", "--config", str(config)])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        yield url, key, psutil.Process(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=60)


@contextmanager
def watched(url: str, process: psutil.Process) -> Iterator[tuple[list[float], list[int]]]:
    """/health latencies (ms, every 10 ms) and the server's RSS samples (every 5 ms)."""
    latencies: list[float] = []
    rss: list[int] = []
    running = threading.Event()
    running.set()

    def health() -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            while running.is_set():
                started = time.perf_counter()
                client.get("/health").raise_for_status()
                latencies.append((time.perf_counter() - started) * 1000)
                time.sleep(0.01)

    def memory() -> None:
        while running.is_set():
            rss.append(process.memory_info().rss)
            time.sleep(0.005)

    threads = [threading.Thread(target=health), threading.Thread(target=memory)]
    for thread in threads:
        thread.start()
    try:
        yield latencies, rss
    finally:
        running.clear()
        for thread in threads:
            thread.join()


def run_case(url: str, case: Case, seconds: float, process: psutil.Process) -> dict:
    baseline = process.memory_info().rss
    with watched(url, process) as (latencies, rss):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sent = 0

            def counted() -> Iterator[bytes]:
                nonlocal sent
                for chunk in case.body():
                    sent += len(chunk)
                    yield chunk

            response = httpx.post(
                url + case.path, content=counted(), headers=case.headers, timeout=300
            )
            case.statuses[response.status_code] = case.statuses.get(response.status_code, 0) + 1
            case.most_sent = max(case.most_sent, sent)
            case.requests += 1
    return {
        "case": case.name,
        "requests": case.requests,
        "statuses": case.statuses,
        "most_sent_mib": round(case.most_sent / PIECE, 1),
        "rss_baseline_mb": round(baseline / 1e6),
        "rss_growth_mb": round((max(rss) - baseline) / 1e6, 1),
        "health_samples": len(latencies),
        "health_p50_ms": round(statistics.median(latencies), 2),
        "health_p99_ms": round(statistics.quantiles(latencies, n=100)[98], 2),
        "health_max_ms": round(max(latencies), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", default="", help="only the cases whose name holds this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, served(Path(folder)) as (url, key, process):
        writer = {"Authorization": f"Bearer {key}"}
        # A few ordinary requests first, so the baseline includes what serving itself holds.
        for _ in range(3):
            httpx.get(url + "/v1/documents", headers=writer).raise_for_status()
        document = b'{"bogus": 1, "text": "'
        cases = [
            Case("no key, 1 GiB to /v1/chat/completions", "/v1/chat/completions", {}, offered),
            Case(
                "writer, 1 GiB JSON to /v1/chat/completions",
                "/v1/chat/completions",
                writer | {"Content-Type": "application/json"},
                offered,
            ),
            Case(
                "writer, 1 GiB multipart upload to /v1/documents",
                "/v1/documents",
                writer | {"Content-Type": "multipart/form-data; boundary=xyz"},
                lambda: offered(UPLOAD_HEAD),
            ),
            Case(
                "writer, 19 MiB JSON document (parsed, then refused)",
                "/v1/documents",
                writer | {"Content-Type": "application/json"},
                lambda: iter([*offered(document, 19 * PIECE), b'"}']),
            ),
        ]
        chosen = [case for case in cases if args.only in case.name]
        results = [run_case(url, case, args.seconds, process) for case in chosen]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        print(
            f"{r['case']}: {r['requests']} requests {r['statuses']}, at most "
            f"{r['most_sent_mib']} MiB sent before the answer; server RSS {r['rss_baseline_mb']} MB"
            f" +{r['rss_growth_mb']} MB; /health {r['health_samples']} samples, p50 "
            f"{r['health_p50_ms']} ms, p99 {r['health_p99_ms']} ms, max {r['health_max_ms']} ms"
        )


if __name__ == "__main__":
    main()
