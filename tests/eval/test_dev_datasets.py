"""The workplace, everyday, assorted and held-out sets: their documents load as a folder
corpus through the product's parsers, their questions validate, and every alias of an
answerable question is in its gold document."""

import json
from collections import Counter
from pathlib import Path

import pytest

from ragserve.eval.corpus import CorpusError, load_corpus
from ragserve.eval.dataset import TYPES, DatasetError, load_dataset
from ragserve.eval.metrics import normalize
from ragserve.rag.parsers import parse_bytes

DATASETS = Path(__file__).parents[2] / "datasets"
# Each dev set: its files, a document and its title, and the fewest questions of each type
# it keeps (unanswerable ones counted apart). The held-out set is only measured on.
SETS = {
    "workplace": (
        {
            "employee-handbook.md",
            "it-security-policy.html",
            "travel-expenses-faq.docx",
            "quarterly-support-report.pdf",
            "steering-meeting-notes.txt",
            "product-guide.md",
            "onboarding-checklist.html",
        },
        ("travel-expenses-faq.docx", "Travel and Expenses FAQ"),
        {"single": 45, "multi": 10, "table": 8, "followup": 10},
        25,
    ),
    "everyday": (
        {
            "board-game-rules.txt",
            "course-syllabus.html",
            "e-bike-manual.docx",
            "lease-agreement.txt",
            "medicine-leaflet.pdf",
            "recipes.md",
            "spare-parts.csv",
            "waste-collection.html",
        },
        ("e-bike-manual.docx", "Veloxa City e-bike: owner's manual"),
        {"single": 50, "multi": 5, "table": 6, "followup": 5},
        20,
    ),
    "assorted": (
        {
            "cli-readme.md",
            "datasheet.pdf",
            "email-thread.txt",
            "insurance-policy.txt",
            "parental-leave-policy.docx",
            "price-list.xlsx",
            "school-newsletter.html",
        },
        ("price-list.xlsx", "price list"),
        {"single": 14, "multi": 5, "table": 14},
        12,
    ),
    "holdout": (
        {
            "api-reference.md",
            "customer-advisory-board-minutes.txt",
            "incident-report-2025-02-11.html",
            "oncall-handbook.md",
            "pricing.xlsx",
            "release-notes.txt",
            "service-level-agreement.pdf",
            "support-faq.docx",
        },
        ("pricing.xlsx", "Brindlecote Conductor pricing"),
        {"single": 45, "multi": 8, "table": 10, "followup": 8},
        20,
    ),
}


@pytest.fixture(scope="module", params=sorted(SETS))
def dev_set(request):
    return request.param


@pytest.fixture(scope="module")
def corpus(dev_set):
    return load_corpus(str(DATASETS / dev_set / "documents"))


@pytest.fixture(scope="module")
def items(dev_set):
    return load_dataset(DATASETS / dev_set / "questions.jsonl")


def test_folder_corpus_is_one_document_per_file(dev_set, corpus):
    files, (example, title), _, _ = SETS[dev_set]
    documents = DATASETS / dev_set / "documents"
    assert {a.doc_id for a in corpus.articles} == files
    assert [a.doc_id for a in corpus.articles] == sorted(files), "path order"
    for article in corpus.articles:
        assert article.text.strip() and article.title
        assert corpus.resolve(article.doc_id) == article.doc_id
        assert corpus.files[article.doc_id] == (documents / article.doc_id).read_bytes()
    assert corpus.by_id[example].title == title


def test_folder_corpus_is_ingested_from_bytes_through_the_parsers(dev_set, corpus):
    sources = corpus.sources()
    assert [s.doc_id for s in sources] == [a.doc_id for a in corpus.articles]
    for source in sources:
        assert source.parsed is None and source.data == corpus.files[source.doc_id]
        assert parse_bytes(source.data, source.source).text == corpus.by_id[source.doc_id].text
    example = SETS[dev_set][1][0]
    subset = corpus.subset(2, {example})
    assert set(subset.files) == {a.doc_id for a in subset.articles}
    assert example in subset.files


def test_folder_corpus_digest_covers_names_and_bytes(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("# A\n\nAlpha.\n")
    (tmp_path / "b.txt").write_text("Beta.\n")
    (tmp_path / "notes.json").write_text('{"not": "a document"}\n')
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "c.txt").write_text("Hidden.\n")
    first = load_corpus(str(tmp_path))
    assert [a.doc_id for a in first.articles] == ["b.txt", "sub/a.md"]
    (tmp_path / "b.txt").write_text("Beta.\r\n")
    assert load_corpus(str(tmp_path)).digest != first.digest, "the bytes changed"
    (tmp_path / "b.txt").write_text("Beta.\n")
    assert load_corpus(str(tmp_path)).digest == first.digest
    (tmp_path / "b.txt").rename(tmp_path / "c.txt")
    assert load_corpus(str(tmp_path)).digest != first.digest, "a name changed"


def test_folder_corpus_errors_name_the_file(tmp_path):
    with pytest.raises(CorpusError, match="no documents"):
        load_corpus(str(tmp_path))
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    with pytest.raises(CorpusError, match=r"broken\.pdf"):
        load_corpus(str(tmp_path))


def test_every_gold_document_resolves(dev_set, corpus, items):
    gold = {i.gold_doc for i in items if i.gold_doc}
    assert gold == SETS[dev_set][0], "every document is some question's gold document"
    assert all(corpus.resolve(doc) == doc for doc in gold)


def test_dataset_counts_and_fields(dev_set, items):
    _, _, minimum, minimum_unanswerable = SETS[dev_set]
    answerable = Counter(i.type for i in items if i.answerable)
    for kind, least in minimum.items():
        assert answerable[kind] >= least, f"{answerable[kind]} {kind} questions"
    assert sum(not i.answerable for i in items) >= minimum_unanswerable
    assert {i.type for i in items} <= set(TYPES)
    for item in items:
        if item.answerable:
            assert item.facts and item.answers == item.facts[0], item.qid
        else:
            assert not item.facts and not item.answers and item.gold_doc is None, item.qid
        if item.type == "multi":
            assert len(item.facts) >= 2, item.qid
        assert bool(item.history) == (item.type == "followup"), item.qid
    assert len({i.question for i in items}) == len(items), "no question twice"


def test_every_alias_is_in_its_gold_document(corpus, items):
    """Case, punctuation and spacing aside, each alias occurs in the parsed gold document as
    a whole-word span. Aliases that only a table holds fail while a parser drops that table."""
    missing = []
    for item in items:
        if not item.answerable:
            continue
        text = f" {normalize(corpus.by_id[item.gold_doc].text)} "
        missing += [
            f"{item.qid} ({item.gold_doc}, {item.type}): {alias!r}"
            for fact in item.facts
            for alias in fact
            if f" {normalize(alias)} " not in text
        ]
    assert not missing, "aliases not in the parsed gold document:\n" + "\n".join(missing)


def write_lines(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


GOOD = {"qid": "q1", "question": "Q?", "answers": ["A"], "gold_doc": "d", "kind": "answerable"}


def test_old_records_load_with_defaults(tmp_path):
    (item,) = load_dataset(write_lines(tmp_path / "old.jsonl", [GOOD]))
    assert item.type == "single" and item.facts == (("A",),) and item.history == ()
    (item,) = load_dataset(
        write_lines(tmp_path / "none.jsonl", [{"qid": "u", "question": "Q?", "gold_doc": None}])
    )
    assert not item.answerable and item.facts == () and item.type == "single"


def test_new_fields_load(tmp_path):
    records = [
        GOOD | {"qid": "m", "type": "multi", "facts": [["A", "a1"], ["B"]]},
        GOOD | {"qid": "f", "type": "followup", "history": ["First?", "Second?"]},
    ]
    multi, followup = load_dataset(write_lines(tmp_path / "new.jsonl", records))
    assert multi.facts == (("A", "a1"), ("B",)) and multi.answers == ("A",)
    assert followup.history == ("First?", "Second?") and followup.facts == (("A",),)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"type": "essay"}, "type must be one of"),
        ({"type": "followup"}, "followup question needs its history"),
        ({"type": "followup", "history": "First?"}, "history must be a list"),
        ({"type": "followup", "history": [""]}, "history must be a list"),
        ({"facts": ["A"]}, "each fact must be a list"),
        ({"facts": [[]]}, "at least one alias"),
        ({"facts": [["A"], [3]]}, "each fact must be a list"),
        ({"facts": []}, "facts must be a non-empty list"),
        ({"facts": "A"}, "facts must be a non-empty list"),
        ({"answers": "A"}, "answers must be a list"),
        ({"kind": "unanswerable", "gold_doc": None, "answers": [], "facts": [["A"]]}, "no facts"),
    ],
)
def test_bad_records_name_their_line(tmp_path, bad, message):
    path = write_lines(tmp_path / "bad.jsonl", [GOOD, GOOD | {"qid": "q2"} | bad])
    with pytest.raises(DatasetError, match=rf"bad\.jsonl:2: .*{message}"):
        load_dataset(path)
