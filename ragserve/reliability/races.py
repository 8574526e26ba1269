"""`ragserve eval races`: concurrent writers and readers against a live server, on either store.

The server runs in-process (uvicorn in a thread, on a free port) over the configured store and
is driven over HTTP. Writer keys (group "editors", which every ACL grants `manage`, so writers
collide on the same documents) ingest new documents, re-ingest existing ones with changed text,
delete them and change their ACLs, granting and revoking reader groups. Reader keys in different
groups, one with none and one in another tenant, search and ask (extractive answers: no model
call, so the model is not the bottleneck). Every sentence of a document names the document and
the revision of its text (race_history.MARKER), so every returned chunk, citation and answer is
attributed. Every request is recorded with its start and completion times and its result, and
race_history checks each read afterwards. Figures: operations run, violations (goal 0), and
responses that were a 5xx, got no answer, carried an internal error ("database is locked"), or
had a status the operation never legitimately gets.
"""

import asyncio
import itertools
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn

from ragserve.access import Role
from ragserve.engine.async_engine import AsyncEngine
from ragserve.engine.engine import LLMEngine
from ragserve.rag.embeddings import Embedder
from ragserve.reliability import race_report
from ragserve.reliability.race_history import (
    INTERNAL_ERROR,
    Operation,
    Outcome,
    ReaderScope,
    check,
    hits_in,
    marker,
)
from ragserve.reports import run_metadata
from ragserve.server.app import build_app
from ragserve.settings import Settings

if TYPE_CHECKING:
    from ragserve.keys import KeyStore

EDITORS = "editors"
READER_GROUPS = ("red", "green", "blue")
# Readers, cycled: their groups, and whether they are in the writers' tenant (the outsider's
# tenant has a group of the same name, which must not help it).
READER_KINDS = (
    (("red",), True),
    (("green",), True),
    (("blue",), True),
    (("red", "green"), True),
    ((), True),
    (("red",), False),
)
SYLLABLES = ("vel", "mor", "ost", "rid", "kan", "tal", "bri", "zen", "quo", "lum", "dar", "fey")
COLOURS = ("amber", "crimson", "teal", "ivory", "violet", "ochre", "slate", "coral")
KEEPERS = ("Ostrid", "Maelis", "Corwen", "Idris", "Talwyn", "Brenna", "Oskar", "Wenna")
QUESTIONS = (
    "What colour is the lighthouse of {place} painted?",
    "How tall is the {place} lighthouse?",
    "Who is the keeper of the lighthouse of {place}?",
)


@dataclass(frozen=True)
class RacePlan:
    duration_s: float = 30.0
    writers: int = 4
    readers: int = 6
    seed: int = 0
    # Live documents the writers keep: few, so that they often work on the same ones.
    documents: int = 12
    answer_share: float = 0.2
    top_k: int = 10


def place(number: int) -> str:
    syllables = [SYLLABLES[number // 12**i % len(SYLLABLES)] for i in range(3)]
    return "".join(syllables).capitalize()


def document_text(number: int, revision: int) -> str:
    """Three short sentences (one chunk), each carrying the marker, so that any chunk or quoted
    sentence of the document names the document and revision it came from."""
    mark, name = marker(number, revision), place(number)
    return (
        f"Record {mark}: the lighthouse of {name} is painted {COLOURS[revision % 8]}. "
        f"Record {mark}: the {name} lighthouse stands {20 + revision % 97} metres tall. "
        f"Record {mark}: the keeper of the {name} lighthouse is {KEEPERS[revision % 8]}."
    )


def acl_body(groups: frozenset[str]) -> dict[str, Any]:
    return {"groups": {EDITORS: "manage"} | dict.fromkeys(sorted(groups), "read")}


@contextmanager
def live_server(
    settings: Settings, engine: LLMEngine | None, embedder: Embedder | None
) -> Iterator[tuple[str, "KeyStore"]]:
    """The app served by uvicorn in a thread on a free port: its URL and its key store."""
    app = build_app(settings, AsyncEngine(engine) if engine else None, embedder)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server stopped while starting (its log says why)")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", app.state.ragserve.keys
    finally:
        server.should_exit = True
        thread.join(timeout=30)


class Race:
    """The writers' and readers' loops, sharing what the writers made, and the history."""

    def __init__(self, client: httpx.AsyncClient, plan: RacePlan, keys: dict[str, str]) -> None:
        self.client = client
        self.plan = plan
        self.keys = keys
        self.history: list[Operation] = []
        self.documents: dict[int, str] = {}  # marker number -> stored document id
        self.live: list[int] = []  # the documents writers believe exist
        self.revisions = itertools.count(1)
        self.unmarked = 0  # returned texts without a marker: not attributable
        self.deadline = time.monotonic() + plan.duration_s

    async def send(
        self, op: Operation, method: str, path: str, body: dict | None = None
    ) -> dict | None:
        """Send and record one request; the body of a success, else None."""
        self.history.append(op)
        headers = {"Authorization": f"Bearer {self.keys[op.actor]}"}
        op.start = time.monotonic()
        try:
            response = await self.client.request(method, path, json=body, headers=headers)
        except httpx.HTTPError as error:
            op.error = f"{type(error).__name__}: {error}"
            return None
        op.end = time.monotonic()
        op.status = response.status_code
        if op.outcome is not Outcome.APPLIED or INTERNAL_ERROR.search(response.text):
            op.error = response.text[:500]
        return response.json() if op.outcome is Outcome.APPLIED else None

    async def writer(self, name: str, rng: random.Random) -> None:
        while time.monotonic() < self.deadline:
            if len(self.live) < self.plan.documents:
                await self.create(name, rng)
                continue
            number = rng.choice(self.live)
            doc = self.documents[number]
            kind = rng.choices(("reingest", "acl", "delete"), (4, 3, 2))[0]
            if kind == "reingest":
                revision = next(self.revisions)
                op = Operation(kind, name, 0.0, doc=doc, revision=revision)
                body = {"text": document_text(number, revision), "doc_id": doc}
                await self.send(op, "POST", "/v1/documents", body)
            elif kind == "acl":
                groups = self.some_groups(rng)
                op = Operation(kind, name, 0.0, doc=doc, groups=groups)
                await self.send(op, "PUT", f"/v1/documents/{doc}/acl", acl_body(groups))
            else:
                op = Operation(kind, name, 0.0, doc=doc)
                await self.send(op, "DELETE", f"/v1/documents/{doc}")
            # A 404 or 409 means another writer deleted it; a re-ingest by its owner recreates it.
            if op.status in (404, 409) or (kind == "delete" and op.status == 200):
                self.live = [n for n in self.live if n != number]
            elif kind == "reingest" and op.status == 201 and number not in self.live:
                self.live.append(number)

    async def create(self, name: str, rng: random.Random) -> None:
        number = len(self.documents) + 1
        # Known before the request goes out, so a read that sees it can attribute it.
        doc = self.documents[number] = f"{name}~d{number}"
        revision, groups = next(self.revisions), self.some_groups(rng)
        op = Operation("create", name, 0.0, doc=doc, revision=revision, groups=groups)
        body = {
            "text": document_text(number, revision),
            "title": f"The {place(number)} lighthouse",
            "doc_id": doc,
            "acl": acl_body(groups),
        }
        if await self.send(op, "POST", "/v1/documents", body) is not None:
            self.live.append(number)

    @staticmethod
    def some_groups(rng: random.Random) -> frozenset[str]:
        return frozenset(g for g in READER_GROUPS if rng.random() < 0.5)

    async def reader(self, name: str, rng: random.Random) -> None:
        while time.monotonic() < self.deadline:
            if not self.documents:
                await asyncio.sleep(0.05)
                continue
            question = rng.choice(QUESTIONS).format(place=place(rng.choice(list(self.documents))))
            if rng.random() < self.plan.answer_share:
                op = Operation("answer", name, 0.0)
                found = await self.send(op, "POST", "/v1/answers", {"question": question})
            else:
                op = Operation("search", name, 0.0)
                body = {"query": question, "top_k": self.plan.top_k}
                found = await self.send(op, "POST", "/v1/search", body)
            for text, source, claimed in returned_texts(found or {}):
                hits = hits_in(text, self.documents, source, claimed)
                self.unmarked += not hits
                op.hits += hits


def returned_texts(body: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """The document text in a search result or an answer: (text, where, the doc id attached)."""
    texts = [(c["text"], "chunk", c["doc_id"]) for c in body.get("data", [])]
    citations = body.get("citations", [])
    texts += [(c["quote"], "citation", c["doc_id"]) for c in citations]
    # An answer quotes its evidence; a refusal (no citations) quotes nothing.
    return texts + ([(body["answer"], "answer", None)] if citations else [])


async def drive(url: str, plan: RacePlan, keys: dict[str, str], readers: list[str]) -> Race:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(120.0, connect=10.0)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        race = Race(client, plan, keys)
        loops = [
            (race.reader if name in readers else race.writer)(
                name, random.Random(f"{plan.seed}:{name}")
            )
            for name in keys
        ]
        await asyncio.gather(*loops)
    return race


def reader_scopes(count: int) -> dict[str, ReaderScope]:
    scopes = {}
    for i in range(count):
        groups, same_tenant = READER_KINDS[i % len(READER_KINDS)]
        name = f"reader{i}-{'-'.join(groups) or 'nogroup'}" + ("" if same_tenant else "-outsider")
        scopes[name] = ReaderScope(frozenset(groups), same_tenant)
    return scopes


def run(
    settings: Settings,
    plan: RacePlan,
    engine: LLMEngine | None = None,
    embedder: Embedder | None = None,
) -> dict[str, Any]:
    """Race the writers against the readers on a live server; the report (race_report.build)."""
    tenant = f"races-{uuid.uuid4().hex[:8]}"
    scopes = reader_scopes(plan.readers)
    with tempfile.TemporaryDirectory() as folder:
        # The race's keys, and its store unless one is given, live and die with the run. Answers
        # quote their evidence without a model call, so the model is not the bottleneck.
        settings = settings.model_copy(update={"data_dir": Path(folder), "answer_style": "quote"})
        with live_server(settings, engine, embedder) as (url, key_store):
            keys = {
                f"writer{i}": key_store.create(f"writer{i}", [EDITORS], tenant, Role.WRITER)[0]
                for i in range(plan.writers)
            }
            for name, scope in scopes.items():
                where = tenant if scope.same_tenant else tenant + "-outsider"
                keys[name] = key_store.create(name, sorted(scope.groups), where, Role.READER)[0]
            started = time.monotonic()
            race = asyncio.run(drive(url, plan, keys, list(scopes)))
            duration = time.monotonic() - started
    meta = run_metadata(
        store=settings.store.split("@")[-1] if settings.store else "a temporary SQLite file",
        tenant=tenant,
        plan=asdict(plan),
        model=settings.model,
        settings=settings.model_dump(mode="json", exclude={"store"}),
    )
    violations = check(race.history, scopes)
    return race_report.build(meta, race, violations, scopes, started, duration)
