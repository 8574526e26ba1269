import math

import pytest

from ragserve.eval.metrics import (
    CitedSentence,
    alce_citation_scores,
    contains_answer,
    dedupe,
    precision_recall_f1,
    ranking_metrics,
    token_f1,
)


def test_ranking_metrics_on_a_hand_made_run():
    relevant = {"q1": {"a"}, "q2": {"b"}, "q3": {"c"}, "q4": {"d"}}
    rankings = {
        "q1": ["a", "x", "y"],  # rank 1
        "q2": ["x", "y", "b"],  # rank 3
        "q3": ["x"] * 0 + [f"n{i}" for i in range(10)] + ["c"],  # rank 11: beyond @10
        "q4": [],  # nothing retrieved still counts as a miss
    }
    mean, per_query = ranking_metrics(relevant, rankings)
    assert per_query["q1"] == pytest.approx(
        {"recall@1": 1, "recall@5": 1, "recall@10": 1, "mrr": 1, "ndcg@10": 1}
    )
    assert per_query["q2"]["recall@1"] == 0 and per_query["q2"]["recall@5"] == 1
    assert per_query["q2"]["mrr"] == pytest.approx(1 / 3)
    assert per_query["q2"]["ndcg@10"] == pytest.approx(1 / math.log2(4))
    assert per_query["q3"]["recall@10"] == 0 and per_query["q3"]["mrr"] == pytest.approx(1 / 11)
    assert per_query["q4"] == dict.fromkeys(per_query["q4"], 0.0)
    assert mean["recall@1"] == pytest.approx(0.25)
    assert mean["recall@5"] == pytest.approx(0.5)
    assert mean["mrr"] == pytest.approx((1 + 1 / 3 + 1 / 11) / 4)


def test_dedupe_keeps_first_occurrence():
    assert dedupe(["d1", "d2", "d1", "d3", "d2"]) == ["d1", "d2", "d3"]


def test_answer_matching_follows_squad_normalisation():
    assert contains_answer("It was founded by Emperor Taizu of Song.", ["Taizu of Song"])
    assert contains_answer("THE answer: 9,192,631,770 Hz", ["9192631770"])
    assert not contains_answer("Taizuko", ["Taizu"]), "whole words only"
    assert token_f1("Taizu of Song", ["Emperor Taizu of Song"]) == pytest.approx(
        2 * 1 * 0.75 / 1.75
    )
    assert token_f1("nothing relevant", ["Gosling"]) == 0.0


def test_refusal_precision_recall_f1():
    refused = [True, True, False, False, True]
    unanswerable = [True, False, True, False, True]
    scores = precision_recall_f1(refused, unanswerable)
    assert scores.precision == pytest.approx(2 / 3)
    assert scores.recall == pytest.approx(2 / 3)
    assert scores.f1 == pytest.approx(2 / 3)
    assert precision_recall_f1([False], [True]).f1 == 0.0


def words_entail(passages: list[str], sentence: str) -> bool:
    """A toy judge: every word of the sentence occurs in the passages."""
    evidence = set(" ".join(passages).lower().split())
    return set(sentence.lower().split()) <= evidence


def test_alce_citation_recall_and_precision():
    sentences = [
        # Supported by its one citation: recall 1, precision 1/1.
        CitedSentence("bees make honey", ["bees make honey from nectar"]),
        # Needs both citations: each is necessary, both precise.
        CitedSentence("bees make wax", ["bees are insects", "they make wax"]),
        # Second citation is irrelevant: the first alone entails the sentence.
        CitedSentence("ants dig", ["ants dig tunnels", "the moon is far"]),
        # Not supported: recall 0, its citation not precise.
        CitedSentence("wasps sting", ["bees make honey"]),
        # No citation at all: recall 0.
        CitedSentence("flies buzz", []),
    ]
    scores = alce_citation_scores(sentences, words_entail)
    assert scores.sentences == 5 and scores.citations == 6
    assert scores.recall == pytest.approx(3 / 5)
    assert scores.precision == pytest.approx(4 / 6)
