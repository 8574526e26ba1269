import json

import pytest

from ragserve.eval.chunking import group_articles
from ragserve.eval.corpus import CorpusError, EvalCorpus, load_corpus
from ragserve.eval.dataset import DatasetError, load_dataset
from ragserve.eval.support import grounded
from ragserve.rag.corpus import Article


def write_lines(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def test_dataset_lines_are_checked(tmp_path):
    good = {"qid": "q1", "question": "Q?", "answers": ["A"], "gold_doc": "d", "kind": "answerable"}
    items = load_dataset(write_lines(tmp_path / "ok.jsonl", [good]))
    assert items[0].answerable and items[0].answers == ("A",)
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2"):
        load_dataset(write_lines(tmp_path / "bad.jsonl", [good, {"question": "no qid"}]))
    with pytest.raises(DatasetError, match="duplicate qid"):
        load_dataset(write_lines(tmp_path / "dup.jsonl", [good, good]))
    with pytest.raises(DatasetError, match="needs gold_doc"):
        load_dataset(write_lines(tmp_path / "gold.jsonl", [good | {"gold_doc": None}]))
    with pytest.raises(DatasetError, match="kind"):
        load_dataset(write_lines(tmp_path / "kind.jsonl", [good | {"kind": "maybe"}]))
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(tmp_path / "missing.jsonl")


def test_corpus_from_jsonl_resolves_ids_and_titles(tmp_path):
    path = write_lines(
        tmp_path / "c.jsonl",
        [{"id": f"d{i}", "title": f"Title {i}", "text": f"text {i}"} for i in range(5)],
    )
    corpus = load_corpus(str(path))
    assert corpus.resolve("d3") == "d3" and corpus.resolve("Title 2") == "d2"
    assert corpus.resolve("nothing") is None
    subset = corpus.subset(3, {"d4"})
    assert [a.doc_id for a in subset.articles] == ["d0", "d1", "d4"], "corpus order is kept"
    assert subset.digest != corpus.digest
    with pytest.raises(CorpusError):
        load_corpus(str(write_lines(tmp_path / "bad.jsonl", [{"title": "no id"}])))


def test_grouped_articles_keep_exact_spans():
    corpus = EvalCorpus("t", [Article(f"a{i}", f"T{i}", f"Body {i}.") for i in range(5)])
    grouped, placements = group_articles(corpus, 2)
    assert len(grouped.articles) == 3
    for article in corpus.articles:
        place = placements[article.doc_id]
        text = grouped.by_id[place.doc_id].text
        assert text[place.start : place.end] == f"{article.title}\n\n{article.text}"


def test_grounding_catches_invented_names_and_numbers():
    passage = ["The Song dynasty was founded in 960 by Emperor Taizu."]
    assert grounded("It began in 960 under Taizu.", passage)
    assert not grounded("It began in 961 under Taizu.", passage)
    assert not grounded("It was founded by Kublai Khan.", passage)
    claim = "The founder of the Northern Song was Taizu."
    assert not grounded(claim, passage)
    assert grounded(claim, passage, question="Who founded the Northern Song?")
