"""Hostile files (tests/hostile_corpus.py): each one gets its own clear error, or its text, fast
and without inflating a bomb; a batch holding all of them still ingests every good file, through
the library and through `ragserve ingest`."""

import contextlib
import json
import os
import re
import signal
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragserve.cli import app
from ragserve.rag.documents import AccessFilter, Acl
from ragserve.rag.ingest import Ingestor, SourceDocument
from ragserve.rag.parsers import ParsedDocument, ParseError, parse_bytes
from ragserve.rag.stores.sqlite import SqliteStore
from ragserve.settings import Settings
from tests.hostile_corpus import GOOD_FILES, GOOD_WORDS, HostileFile, hostile_files

# CPU seconds, far above any file here (the slowest takes a fraction of one): only a parser
# caught in a loop trips it, however busy the machine.
PARSE_LIMIT_S = 10.0
# The bombs unpack to 300 MB; refusing one may allocate a few MB (a part's first piece).
BOMB_MEMORY_LIMIT = 16 << 20
OWNER = AccessFilter("acme", "olga")


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the test if the block spends more CPU time than this: a parser
    caught in a loop fails its file instead of stalling the suite."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} CPU seconds")

    previous = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def check_outcome(hostile: HostileFile, error: str | None) -> None:
    """The file's own error (naming it, with the expected words), or acceptance where allowed."""
    if error is None:
        assert hostile.expect != "error", f"{hostile.name} was accepted"
    else:
        assert hostile.expect != "text", f"{hostile.name} should parse, got: {error}"
        assert hostile.name in error and hostile.words in error, error


@pytest.mark.parametrize("hostile", hostile_files(), ids=lambda hostile: hostile.name)
def test_each_hostile_file_gets_its_own_clear_error_or_its_text(hostile):
    with time_limit(PARSE_LIMIT_S):
        try:
            parsed = parse_bytes(hostile.data, hostile.name)
        except ParseError as error:
            check_outcome(hostile, str(error))
            return
    check_outcome(hostile, None)
    assert hostile.words in parsed.text and re.search(r"\w", parsed.text)


@pytest.mark.parametrize("name", ["bomb.docx", "lying-bomb.docx", "crc-bomb.docx", "bomb.xlsx"])
def test_a_zip_bomb_is_refused_without_being_inflated(name):
    bomb = next(hostile for hostile in hostile_files() if hostile.name == name)
    tracemalloc.start()
    try:
        with time_limit(PARSE_LIMIT_S), pytest.raises(ParseError, match=bomb.words):
            parse_bytes(bomb.data, name)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # python-docx alone inflates this bomb whole: a peak of 600 MB, lying sizes or not.
    assert peak < BOMB_MEMORY_LIMIT, f"{peak} bytes allocated"


def test_encodings_are_decoded_by_their_mark_or_declaration():
    files = {hostile.name: hostile.data for hostile in hostile_files()}
    text = parse_bytes(files["utf16-le-bom.txt"], "utf16-le-bom.txt").text
    # The byte-order mark is not text: spans and the title start at the first character.
    assert text.startswith("Café crème: “smart quotes”")
    assert parse_bytes(files["utf8-bom.md"], "utf8-bom.md").title.startswith("Café")
    # A page that declares iso-8859-1 is read as windows-1252, as browsers read it.
    html = parse_bytes(files["cp1252-declared.html"], "cp1252-declared.html")
    assert "“Café” crème brûlée" in html.text


def library_only_cases() -> list[tuple[SourceDocument, str]]:
    """What only a library caller can hand in: a file name that is not UTF-8 (as Python reads
    one, with surrogates) and text given already parsed with a NUL or a lone surrogate."""
    return [
        (SourceDocument("name-\udcff.txt", data=b"Fine text, odd name."), "the name has"),
        (SourceDocument("nul", parsed=ParsedDocument("a\x00b", "T")), "NUL character"),
        (SourceDocument("title", parsed=ParsedDocument("Fine.", "\ud800")), "unpaired"),
    ]


@pytest.fixture
def store(embedder, tmp_path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "index.sqlite", embedder.dimension)
    yield store
    store.close()


def test_a_batch_with_every_hostile_file_ingests_the_good_ones(embedder, store):
    ingestor = Ingestor(store, embedder)
    hostile = {h.name: h for h in hostile_files()}
    library = library_only_cases()
    items = [SourceDocument(h.name, data=h.data) for h in hostile.values()]
    items += [item for item, _ in library]
    good = [SourceDocument(name, data=data) for name, data in GOOD_FILES.items()]
    # The good files go in among the bad ones: first, every so often, and last.
    for i, item in enumerate(good):
        items.insert(round(i * len(items) / (len(good) - 1)), item)
    started = time.perf_counter()
    results = ingestor.ingest_many(items, "acme", "olga", Acl())
    elapsed = time.perf_counter() - started
    assert [r.source for r in results] == [item.source for item in items]
    by_source = {r.source: r for r in results}
    for name, case in hostile.items():
        result = by_source[name]
        check_outcome(case, result.error)
    for item, words in library:
        assert not by_source[item.source].ok and words in (by_source[item.source].error or "")
    for name, word in GOOD_WORDS.items():
        assert by_source[name].ok, by_source[name].error
        hits = store.keyword_search(OWNER, word, 3)
        assert hits and hits[0].source == name, (name, hits)
    stored = store.list_documents(OWNER)
    assert len(stored) == sum(r.ok for r in results)
    failed = sum(not r.ok for r in results)
    print(f"\n{len(items)} files, {failed} refused, {len(stored)} stored in {elapsed:.1f} s")


def test_the_cli_reports_each_bad_file_and_stores_the_good_ones(embedder, tmp_path, monkeypatch):
    folder = tmp_path / "inbox"
    folder.mkdir()
    for hostile in hostile_files():
        (folder / hostile.name).write_bytes(hostile.data)
    for name, data in GOOD_FILES.items():
        (folder / name).write_bytes(data)
    # A name that is not UTF-8: Python reads it with a surrogate, which nothing can store.
    (folder / os.fsdecode(b"odd-\xff-name.txt")).write_bytes(b"A file whose name is not UTF-8.")
    data_dir = tmp_path / "data"
    # The command's own code, in this process and with the embedder already loaded (a second
    # interpreter would spend most of the test starting up).
    monkeypatch.setattr("ragserve.services.build_embedder", lambda settings: embedder)
    command = ["ingest", str(folder), "--tenant", "acme", "--owner", "olga"]
    result = CliRunner().invoke(app, [*command, "--data-dir", str(data_dir), "--json"])
    assert result.exit_code == 1, result.output[-2000:]
    records = {Path(r["source"]).name: r for r in json.loads(result.stdout)}
    assert len(records) == len(hostile_files()) + len(GOOD_FILES) + 1
    for hostile in hostile_files():
        record = records[hostile.name]
        check_outcome(hostile, record["error"])
    odd = next(r for name, r in records.items() if name.startswith("odd-"))
    assert "the name has an unpaired surrogate" in odd["error"]
    index = SqliteStore(Settings(data_dir=data_dir).store_url, embedder.dimension)
    try:
        for name, word in GOOD_WORDS.items():
            assert records[name]["error"] is None
            hits = index.keyword_search(OWNER, word, 3)
            assert hits and Path(hits[0].source).name == name, (name, hits)
    finally:
        index.close()
