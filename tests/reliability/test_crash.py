"""Kill -9 during ingestion, the short form of `ragserve eval crash`, on both stores."""

import pytest

from ragserve.reliability import crash
from ragserve.settings import Settings
from tests.conftest import new_postgres_database


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_documents_reported_stored_survive_kills_whole(backend, tmp_path, request):
    store = None
    if backend == "postgres":
        store = new_postgres_database(request.getfixturevalue("postgres_server"))
    settings = Settings(data_dir=tmp_path / "data", store=store)
    report = crash.run(settings, tmp_path, kills=2, documents=70, max_delay_s=2.0, seed=3)
    assert report.kills == 2
    assert sum(r.reported for r in report.rounds) > 0, "the kills came after documents stored"
    assert report.lost == 0, [r.problems for r in report.rounds]
    assert not report.final_problems
    assert 0 < report.final_embedded == report.expected_embedded < report.chunks


def test_the_check_finds_a_damaged_document(tmp_path):
    """The harness is only worth its figures if it notices damage: remove one chunk's
    full-text row and one document, and both are reported."""
    import sqlite3
    from dataclasses import asdict

    from ragserve.rag.documents import Acl
    from ragserve.rag.ingest import read_sources
    from ragserve.services import DocumentIndex

    settings = Settings(data_dir=tmp_path / "data")
    searches = crash.write_corpus(tmp_path / "corpus", 3, seed=1)
    index = DocumentIndex.open(settings)
    acl = Acl.of(groups=[crash.GROUP])
    results = index.ingestor.ingest_many(
        read_sources([tmp_path / "corpus"]), crash.TENANT, crash.OWNER, acl
    )
    reported = [asdict(r) for r in results]
    check = crash.CrashCheck(index, searches, tmp_path / "data" / "index.sqlite")
    assert check.problems(reported) == []
    damaged, gone = reported[0]["doc_id"], reported[1]["doc_id"]
    with sqlite3.connect(tmp_path / "data" / "index.sqlite") as db:
        db.execute(
            "DELETE FROM postings WHERE chunk = (SELECT MIN(rowid) FROM chunks WHERE doc_id = ?)",
            (damaged,),
        )
        db.execute("DELETE FROM documents WHERE doc_id = ?", (gone,))
    problems = check.problems(reported)
    assert any(p.startswith(f"{damaged}: full-text search") for p in problems)
    assert any(p.startswith(f"{gone}: reported stored") for p in problems)
    index.store.close()
