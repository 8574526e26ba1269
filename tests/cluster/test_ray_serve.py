"""ragserve on a local Ray cluster: two engine replicas (a small KV pool each) behind two API
replicas, deployed as `ragserve serve --replicas 2` deploys them."""

import asyncio
import io
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

# Ray is optional (ragserve[ray]; `make test` installs it, `make test-fast` runs without it).
pytest.importorskip("ray")

from ragserve.access import Role
from ragserve.cluster.deploy import deployed
from ragserve.keys import KeyStore
from ragserve.settings import Settings

MODEL = "smollm2-135m-instruct"
MEMO = (
    b"# Harbour works\n\nThe harbour crane of Vellmar was repaired by Ostkran in March. "
    b"The repair of the harbour crane cost 317,000 euros.\n"
)
QUESTION = "How much did the repair of the harbour crane of Vellmar cost?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    url: str
    keys: KeyStore

    def key(self, user: str, groups: tuple[str, ...] = (), role: Role = Role.READER) -> str:
        return self.keys.create(user, list(groups), "default", role)[0]

    def metrics(self) -> dict[str, float]:
        samples = {}
        for line in httpx.get(self.url + "/metrics").text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def series(self, prefix: str) -> dict[str, float]:
        return {k: v for k, v in self.metrics().items() if k.startswith(prefix)}

    def wait_for(self, prefix: str, condition, timeout_s: float = 15.0) -> dict[str, float]:
        """Engine replicas report every second: poll /metrics until condition holds."""
        deadline = time.monotonic() + timeout_s
        while True:
            series = self.series(prefix)
            if condition(series) or time.monotonic() > deadline:
                return series
            time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    data = tmp_path_factory.mktemp("data")
    settings = Settings(
        data_dir=data,
        port=free_port(),
        replicas=2,
        api_replicas=2,
        kv_cache_memory_bytes=48 << 20,
        max_num_seqs=8,
        max_concurrent_requests_per_user=2,
        response_cache=True,
    )
    with deployed(settings) as url:
        yield Cluster(url, KeyStore(data / "keys.sqlite"))


def complete(cluster: Cluster, key: str, prompt: str, max_tokens: int = 4) -> dict:
    response = httpx.post(
        cluster.url + "/v1/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_both_replicas_serve_and_a_shared_prefix_stays_on_one(cluster):
    topics = ["lighthouses", "glaciers", "violins", "comets", "orchards", "tramways"]
    # One user each: the per-user limit (2 in flight) would refuse the rest.
    keys = [cluster.key(f"pia{n}") for n in range(len(topics))]
    prefixes = [f"A long report on {t}. " + f"It covers {t} in great detail. " * 12 for t in topics]

    async def all_at_once() -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            replies = await asyncio.gather(
                *(
                    client.post(
                        cluster.url + "/v1/completions",
                        headers={"Authorization": f"Bearer {key}"},
                        json={"model": MODEL, "prompt": p + "Summary:", "max_tokens": 16},
                    )
                    for p, key in zip(prefixes, keys, strict=True)
                )
            )
        assert [r.status_code for r in replies] == [200] * len(prefixes)

    asyncio.run(all_at_once())
    queries = cluster.wait_for(
        "ragserve:prefix_cache_queries_total",
        lambda s: len(s) == 2 and all(v > 0 for v in s.values()),
    )
    assert len(queries) == 2 and all(v > 0 for v in queries.values()), queries

    # Each prefix went to one replica; the same prefix again finds its blocks there.
    for question in ("Who wrote it?", "When?", "Why?"):
        usage = complete(cluster, keys[0], prefixes[2] + question)["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] >= 96, usage
    routes = cluster.wait_for(
        "ragserve:router_decisions_total",
        lambda s: sum(v for k, v in s.items() if 'decision="prefix"' in k) >= 3,
    )
    assert sum(v for k, v in routes.items() if 'decision="prefix"' in k) >= 3, routes


def test_a_revoked_key_fails_on_every_replica_at_once(cluster):
    key = cluster.key("rex")
    me = {"Authorization": f"Bearer {key}"}
    assert {httpx.get(cluster.url + "/v1/me", headers=me).status_code for _ in range(6)} == {200}
    record = next(r for r in cluster.keys.list() if r.user == "rex")
    assert cluster.keys.revoke(record.key_id)
    # Ray Serve's proxy spreads these over both API replicas; none may still accept the key.
    statuses = [httpx.get(cluster.url + "/v1/me", headers=me).status_code for _ in range(12)]
    assert statuses == [401] * 12


def test_the_per_user_concurrency_limit_holds_across_replicas(cluster):
    key = cluster.key("uma")
    body = {"model": MODEL, "prompt": "Count slowly:", "max_tokens": 48, "ignore_eos": True}

    async def four_streams() -> list[int]:
        async with httpx.AsyncClient(timeout=120) as client:

            async def stream() -> int:
                async with client.stream(
                    "POST",
                    cluster.url + "/v1/completions",
                    headers={"Authorization": f"Bearer {key}"},
                    json={**body, "stream": True},
                ) as response:
                    await response.aread()
                    return response.status_code

            return await asyncio.gather(*(stream() for _ in range(4)))

    statuses = asyncio.run(four_streams())
    # Two API replicas each admitting two would let all four through.
    assert sorted(statuses) == [200, 200, 429, 429], statuses


def test_a_deleted_document_is_gone_from_answers_on_every_replica(cluster):
    writer = cluster.key("wes", ("editors",), Role.WRITER)
    reader = cluster.key("ria", ("staff",))
    uploaded = httpx.post(
        cluster.url + "/v1/documents",
        headers={"Authorization": f"Bearer {writer}"},
        files={"file": ("harbour.md", io.BytesIO(MEMO), "text/markdown")},
        data={"acl": '{"groups": {"editors": "manage", "staff": "read"}}'},
        timeout=60,
    )
    assert uploaded.status_code == 201, uploaded.text
    doc_id = uploaded.json()["id"]

    def cited() -> list[bool]:
        """Asks on both API replicas (the response cache of each may hold the answer)."""
        results = []
        for _ in range(8):
            response = httpx.post(
                cluster.url + "/v1/answers",
                headers={"Authorization": f"Bearer {reader}"},
                json={"question": QUESTION},
                timeout=120,
            )
            assert response.status_code == 200, response.text
            results.append(any(c["doc_id"] == doc_id for c in response.json()["citations"]))
        return results

    assert cited() == [True] * 8
    deleted = httpx.delete(
        cluster.url + f"/v1/documents/{doc_id}", headers={"Authorization": f"Bearer {writer}"}
    )
    assert deleted.status_code in (200, 204), deleted.text
    assert cited() == [False] * 8
