"""What a user cannot read changes nothing the user sees: /v1/search scores and order and
/v1/answers (answer, answerability, citations) are bit-identical before and after other users,
other groups and another tenant write documents full of the same words, on SQLite and on
PostgreSQL. The server runs without a response cache, so every answer is computed again."""

import random
from collections.abc import Iterator

import httpx
import pytest

from ragserve.access import Role
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.settings import Settings
from tests.conftest import new_postgres_database
from tests.server.conftest import LiveServer, start_server

FACTS = [
    "The Bluebird deal with Globex closes on {day} September for {n} million euros.",
    "Zorblax harvesting in the northern valley starts in spring and needs {n} workers.",
    "The quibbit ledger lists {n} items sold to Shelbyville on day {day}.",
    "Our travel allowance for domestic trips is {n} NOK a day, paid within {day} days.",
    "The river inventory report counts {n} boats moored at pier {day}.",
]
QUESTIONS = [
    "When does the Bluebird deal close?",
    "How many workers does zorblax harvesting need?",
    "What is the travel allowance for domestic trips?",
    "zorblax quibbit",
    "How many boats are in the river inventory?",
]


def documents(rng: random.Random, count: int) -> list[str]:
    """Documents of two to four sentences drawn from FACTS with random figures."""
    return [
        " ".join(
            rng.choice(FACTS).format(n=rng.randint(2, 200), day=rng.randint(1, 30))
            for _ in range(rng.randint(2, 4))
        )
        for _ in range(count)
    ]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def live(request, tmp_path_factory, embedder) -> Iterator[LiveServer]:
    store = None
    if request.param == "postgres":
        store = new_postgres_database(request.getfixturevalue("postgres_server"))
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        store=store,
        dtype="float32",
        answer_style="generate",
        max_num_batched_tokens=64,
    )
    engine = LLMEngine(
        EngineConfig(dtype="float32", kv_cache_memory_bytes=4096 * 46080, max_num_batched_tokens=64)
    )
    yield from start_server(settings, engine, embedder)


def upload(live: LiveServer, key: str, text: str, groups: list[str] | None = None) -> None:
    body = {"text": text, "title": text.split(" ")[1]}
    if groups is not None:
        body["acl"] = {"groups": groups}
    response = httpx.post(
        f"{live.url}/v1/documents",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert response.status_code == 201, response.text


def seen(live: LiveServer, key: str) -> list[object]:
    """Carol's searches and answers, without what differs between two runs of the same request:
    timings, and the prompt tokens found in the prefix cache (her first run cached them)."""
    headers = {"Authorization": f"Bearer {key}"}
    seen: list[object] = []
    for question in QUESTIONS:
        search = httpx.post(
            f"{live.url}/v1/search", json={"query": question}, headers=headers, timeout=60
        )
        answer = httpx.post(
            f"{live.url}/v1/answers", json={"question": question}, headers=headers, timeout=120
        )
        assert search.status_code == answer.status_code == 200, search.text + answer.text
        body = answer.json()
        body.pop("timings")
        body.pop("id")  # each answer given has its own
        body["usage"].pop("prompt_tokens_details", None)
        seen += [search.json(), body]
    # Searches first, then answers: zip pairs each with its question.
    return seen[0::2] + seen[1::2]


def test_other_users_groups_and_tenants_change_nothing_carol_sees(live):
    rng = random.Random(35)
    admin = live.key("root", tenant="default", role=Role.ADMIN)
    carol = live.key("carol", ("staff",))
    dave = live.key("dave", ("eng",), role=Role.WRITER)
    erin = live.key("erin", ("staff",), tenant="beta", role=Role.WRITER)
    for text in documents(rng, 4):
        upload(live, admin, text, ["staff"])
    before = seen(live, carol)
    assert any(not body["refused"] for body in before[len(QUESTIONS) :]), "some are answered"
    for text in documents(rng, 3):
        upload(live, dave, text)  # dave's own
        upload(live, dave, text, ["eng"])  # his group's
        upload(live, erin, text, ["staff"])  # another tenant's staff
        upload(live, admin, text, ["board"])  # a group carol is not in
    after = seen(live, carol)
    for question, was, now in zip(QUESTIONS * 2, before, after, strict=True):
        for field in was:
            assert now[field] == was[field], (question, field)
