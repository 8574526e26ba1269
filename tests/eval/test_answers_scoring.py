import pytest

from ragserve.eval.answers import summarize
from ragserve.eval.claims import cited_sentences
from ragserve.rag.answer import AnswerResult
from ragserve.rag.citations import Citation


def citation(n: int, chunk_id: str) -> Citation:
    return Citation(n, f"doc-{chunk_id}", chunk_id, "t", 0, 1, "q", 1.0)


def test_cited_sentences_pair_each_sentence_with_its_passages():
    result = AnswerResult(
        "Bees make honey [1]. They also make wax [1] [2]. Nobody knows why.",
        "generated",
        [citation(1, "c1"), citation(2, "c2")],
    )
    sentences = cited_sentences(result, {"c1": "P1", "c2": "P2"})
    assert [(s.text, s.passages) for s in sentences] == [
        ("Bees make honey.", ["P1"]),
        ("They also make wax.", ["P1", "P2"]),
        ("Nobody knows why.", []),
    ]


def test_markers_after_the_full_stop_belong_to_that_sentence():
    result = AnswerResult(
        "The Song dynasty ruled from 960 to 1279. [1] He reigned until 976. [2]",
        "extractive",
        [citation(1, "c1"), citation(2, "c2")],
    )
    sentences = cited_sentences(result, {"c1": "P1", "c2": "P2"})
    assert [(s.text, s.passages) for s in sentences] == [
        ("The Song dynasty ruled from 960 to 1279.", ["P1"]),
        ("He reigned until 976.", ["P2"]),
    ]


def test_markers_end_a_quoted_row_or_line_without_a_full_stop():
    result = AnswerResult(
        "Add-on: Extra seat | Price: 12 [1] Add-on: Runner | Price: 240 [2] "
        "Maintenance counts as Downtime; [1] The fee is 400 NOK [1] and bookings go by lot [2].",
        "extractive",
        [citation(1, "c1"), citation(2, "c2")],
    )
    sentences = cited_sentences(result, {"c1": "P1", "c2": "P2"})
    assert [(s.text, s.passages) for s in sentences] == [
        ("Add-on: Extra seat | Price: 12", ["P1"]),
        ("Add-on: Runner | Price: 240", ["P2"]),
        ("Maintenance counts as Downtime;", ["P1"]),
        # A sentence cited in its middle goes on in lower case: one sentence, both sources.
        ("The fee is 400 NOK and bookings go by lot.", ["P1", "P2"]),
    ]


def test_a_schema_answers_claims_are_its_cited_values():
    data = {"who": {"a/b": "Thomas Brand"}, "years": [1874, 1875], "ok": True}
    result = AnswerResult(
        '{"who": ...}',
        "generated",
        [citation(1, "c1"), citation(2, "c2")],
        value=data,
        field_citations={"/who/a~1b": [1], "/years/1": [1, 2]},
    )
    sentences = cited_sentences(result, {"c1": "P1", "c2": "P2"})
    assert [(s.text, s.passages) for s in sentences] == [
        ("Thomas Brand", ["P1"]),
        ("1875", ["P1", "P2"]),
    ]


def record(kind: str, refused: bool, **fields) -> dict:
    timings = {"retrieval_ms": 10.0, "total_ms": 100.0}
    usage = {} if refused else {"prompt_tokens": 300, "completion_tokens": 20}
    base = {
        "kind": kind,
        "type": "single",
        "refused": refused,
        "gold_retrieved": True,
        "timings": timings,
    }
    base["mode"] = "refused" if refused else "generated"
    return base | {"usage": usage} | fields


def test_summary_of_a_hand_made_run():
    cite = {"recall": 1.0, "precision": 0.5, "citations": 2, "sentences": 1}
    records = [
        record(
            "answerable",
            False,
            correct=True,
            f1=1.0,
            raw_correct=True,
            citation=cite,
            supported=True,
        ),
        record(
            "answerable",
            False,
            correct=False,
            f1=0.5,
            raw_correct=True,
            citation={"recall": 0.0, "precision": 0.0, "citations": 1, "sentences": 1},
            supported=False,
            gold_retrieved=False,
        ),
        record("answerable", True, correct=False, f1=0.0, raw_correct=False),
        record("unanswerable", True),
        record("unanswerable", False, citation=cite, supported=True),
    ]
    report = summarize(records)
    generation = report["generation"]
    assert report["retrieval"]["gold_in_prompt"] == pytest.approx(2 / 3)
    assert generation["answered"] == 3
    assert generation["correct"] == pytest.approx(1 / 3)
    assert generation["f1"] == pytest.approx(0.5)
    assert generation["correct_when_gold_in_prompt"] == pytest.approx(1 / 2)
    assert generation["raw_correct"] == pytest.approx(2 / 3)
    assert generation["supported"] == pytest.approx(2 / 3)
    assert generation["citation_precision"] == pytest.approx(1 / 3)
    refusal = report["refusal"]
    assert refusal["precision"] == pytest.approx(1 / 2) and refusal["recall"] == pytest.approx(
        1 / 2
    )
    assert refusal["answerable_refused"] == pytest.approx(1 / 3)
    assert report["tokens"]["generated_for"] == 3
    assert report["latency_ms"]["total_ms"]["p50"] == pytest.approx(100.0)
