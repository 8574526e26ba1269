"""Listing documents a page at a time (Store.list_documents with after/limit), on both backends:
10,000 documents, five readers with different groups, pages read while another thread inserts
and deletes. No document is listed twice, none that existed throughout is skipped, and none
the reader may not read appears."""

import random
import threading
import time

from ragserve.rag.documents import AccessFilter, Acl, DocumentRecord

TENANT = "acme"
DOCUMENTS = 10_000
GROUPS = [f"g{i}" for i in range(5)]
PAGE = 97
WRITER_BUSY = threading.Event()


def record(doc_id: str, groups: list[str]) -> DocumentRecord:
    return DocumentRecord(
        doc_id=doc_id,
        tenant=TENANT,
        owner="writer",
        source="test",
        title=doc_id,
        content_hash="-",
        acl=Acl.of(groups=groups),
    )


def groups_of(i: int) -> list[str]:
    # Two groups per document (sometimes one): each reader sees a different ~2/5 of them.
    return sorted({GROUPS[i % 5], GROUPS[(i // 5) % 5]})


def read_all_pages(store, reader: AccessFilter, writing: list[bool]) -> list[str]:
    """Every page; writing records, per page, whether the writer was still at work."""
    listed, after = [], None
    while True:
        page = store.list_documents(reader, after, PAGE)
        writing.append(WRITER_BUSY.is_set())
        listed += [d.doc_id for d in page]
        assert len(page) <= PAGE
        if len(page) < PAGE:
            return listed
        after = page[-1].doc_id


def test_pages_are_stable_under_concurrent_writes(store_factory):
    store = store_factory()
    for i in range(DOCUMENTS):
        store.write_document(record(f"doc-{i:05d}", groups_of(i)), [])
    readers = [AccessFilter(TENANT, f"reader{k}", (GROUPS[k],)) for k in range(5)]
    rng = random.Random(7)
    doomed = set(rng.sample(range(DOCUMENTS), 300))
    stop = threading.Event()
    written: dict[str, list[str]] = {}

    def churn() -> None:
        writer = AccessFilter(TENANT, "writer")
        WRITER_BUSY.set()
        for n, i in enumerate(sorted(doomed, key=lambda _: rng.random())):
            if stop.is_set():
                break
            # New documents land before, between and after the originals' ids.
            doc_id = rng.choice(["a", "doc-0", "doc-05", "zz"]) + f"-new-{n}"
            groups = [rng.choice(GROUPS)]
            store.write_document(record(doc_id, groups), [])
            written[doc_id] = groups
            store.delete_document(writer, f"doc-{i:05d}")
            time.sleep(0.002)
        WRITER_BUSY.clear()

    writing: list[bool] = []
    thread = threading.Thread(target=churn)
    thread.start()
    try:
        pages = {reader.user: read_all_pages(store, reader, writing) for reader in readers}
    finally:
        stop.set()
        thread.join()
    for k, reader in enumerate(readers):
        listed = pages[reader.user]
        assert len(listed) == len(set(listed)), "a document listed twice"
        assert listed == sorted(listed)
        throughout = {
            f"doc-{i:05d}"
            for i in range(DOCUMENTS)
            if GROUPS[k] in groups_of(i) and i not in doomed
        }
        assert throughout <= set(listed), "a document that existed throughout was skipped"
        for doc_id in set(listed) - throughout:
            groups = written.get(doc_id) or groups_of(int(doc_id.removeprefix("doc-")))
            assert GROUPS[k] in groups, f"{reader.user} was shown {doc_id}"
    assert sum(writing) > 20, "the writer ran while the pages were read"


def test_a_page_after_any_id_holds_only_what_the_reader_may_read(store_factory):
    store = store_factory()
    for i in range(50):
        store.write_document(record(f"doc-{i:05d}", groups_of(i)), [])
    reader = AccessFilter(TENANT, "r", ("g1",))
    everything = [d.doc_id for d in store.list_documents(reader)]
    # A cursor naming a hidden document pages exactly as one naming a visible neighbour.
    hidden = next(f"doc-{i:05d}" for i in range(50) if "g1" not in groups_of(i))
    after_hidden = [d.doc_id for d in store.list_documents(reader, hidden, 5)]
    assert after_hidden == [d for d in everything if d > hidden][:5]
    assert [d.doc_id for d in store.list_documents(reader, None, 1000)] == everything
