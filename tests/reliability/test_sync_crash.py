"""Kill -9 during source syncs, the short form of `ragserve eval sync-crash`, on both stores."""

import pytest

from ragserve.reliability import sync_crash
from ragserve.settings import Settings
from tests.conftest import new_postgres_database


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_killed_syncs_converge_to_a_clean_sync(backend, tmp_path, request):
    store = None
    if backend == "postgres":
        store = new_postgres_database(request.getfixturevalue("postgres_server"))
    settings = Settings(data_dir=tmp_path / "data", store=store)
    report = sync_crash.run(settings, tmp_path, rounds=3, files=150, seed=5)
    assert report.kills == 3 and report.mid_sync_kills >= 1
    assert report.passed, report.problems[:10]
    assert report.final_documents == report.clean_documents == 150 - 3 * 3 + 3 * 3


def test_the_check_notices_a_difference(tmp_path):
    """Worth its verdict only if it fails on a difference: a document of the crashed tenant
    deleted behind its back (and its file state kept) is reported."""
    from ragserve.rag.documents import AccessFilter
    from ragserve.services import DocumentIndex

    settings = Settings(data_dir=tmp_path / "data")
    report = sync_crash.run(settings, tmp_path / "first", rounds=1, files=20, seed=1)
    assert report.passed
    index = DocumentIndex.open(settings)
    everything = AccessFilter("crashed", "operator", everything=True)
    doomed = index.store.list_documents(everything)[0]
    index.store.delete_document(everything, doomed.doc_id)
    index.store.close()
    assert sync_crash._index(settings, "crashed") != sync_crash._index(settings, "clean")
