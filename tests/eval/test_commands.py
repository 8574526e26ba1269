"""Smoke tests of `ragserve eval ...` on a tiny hand-made corpus and dataset."""

import json
import subprocess
import sys

import pytest

from ragserve.engine.config import cache_dir
from ragserve.eval.metrics import contains_answer, precision_recall_f1

DOCUMENTS = {
    "bees": ("Honey bees", "Honey bees make honey from nectar. A hive has one queen bee."),
    "zorb": ("Zorbulon", "The zorbulon is a mountain in Quarvia. Its summit is 4321 metres high."),
    "tea": ("Tea", "Tea is an aromatic drink made from the leaves of Camellia sinensis."),
    "rome": ("Rome", "Rome is the capital of Italy. It was founded, legend says, in 753 BC."),
    "oak": ("Oak", "An oak is a tree of the genus Quercus. Oaks bear acorns."),
    "jazz": ("Jazz", "Jazz is a music genre that began in New Orleans around 1900."),
}
QUESTIONS = [
    ("a1", "How high is the summit of the zorbulon in Quarvia?", ["4321 metres"], "zorb"),
    ("a2", "What do honey bees make honey from?", ["nectar"], "bees"),
    ("a3", "Which genus do oak trees belong to?", ["Quercus"], "oak"),
    ("a4", "In which city did jazz music begin?", ["New Orleans"], "jazz"),
    ("u1", "Who won the 1987 chess olympiad in Dubai?", [], None),
    ("u2", "What is the airspeed of an unladen swallow?", [], None),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("eval")
    corpus = folder / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": k, "title": t, "text": x}) + "\n" for k, (t, x) in DOCUMENTS.items()
        )
    )
    dataset = folder / "dataset.jsonl"
    dataset.write_text(
        "".join(
            json.dumps(
                {
                    "qid": qid,
                    "question": question,
                    "answers": answers,
                    "gold_doc": gold,
                    "kind": "answerable" if gold else "unanswerable",
                }
            )
            + "\n"
            for qid, question, answers, gold in QUESTIONS
        )
    )
    config = folder / "ragserve.toml"
    config.write_text("kv_cache_memory_bytes = 67108864\nmax_num_seqs = 16\n")
    common = ["--dataset", str(dataset), "--corpus", str(corpus), "--config", str(config)]
    return folder, common


def run_eval(folder, common, command: str, *args: str) -> dict:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragserve",
            "eval",
            command,
            *common,
            "--out",
            str(folder / "out"),
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for suffix in (".json", ".md"):
        assert (folder / "out" / f"{command}{suffix}").is_file()
    assert list((folder / "out").glob(f"{command}-*.png"))
    meta = report["meta"]
    assert meta["dataset_digest"] and meta["corpus_digest"] and meta["code_version"]
    assert meta["model"] and meta["settings"]["chunk_size"] == 128
    return report


def test_retrieval_metrics_and_the_index_cache(inputs):
    folder, common = inputs
    report = run_eval(folder, common, "retrieval", "--rerankers", "llm")
    assert set(report["methods"]) == {"bm25", "dense", "hybrid", "hybrid+llm"}
    for method, per_query in report["per_query"].items():
        assert len(per_query) == 4, "only answerable questions are ranked"
        for qid, metrics in per_query.items():
            gold = dict((q, g) for q, _, _, g in QUESTIONS)[qid]
            assert metrics["recall@1"] == (metrics["top"][0] == gold)
        mean = sum(m["mrr"] for m in per_query.values()) / 4
        assert report["methods"][method]["mrr"] == pytest.approx(mean)
    assert report["per_query"]["bm25"]["a1"]["recall@1"] == 1, "a unique word ranks first"
    assert len(report["best_similarity"]["unanswerable"]) == 2
    # The cache may hold this corpus's indexes under other settings (an earlier code version's
    # key): the one this run used is the newest.
    cached = (cache_dir() / "eval").glob(f"{report['meta']['corpus_digest']}-*.sqlite")
    index = sorted(cached, key=lambda path: path.stat().st_mtime_ns)
    built = index[-1].stat().st_mtime_ns
    run_eval(folder, common, "retrieval", "--rerankers", "none")
    assert index[-1].stat().st_mtime_ns == built, "the second run reuses the cached index"
    again = (cache_dir() / "eval").glob(f"{report['meta']['corpus_digest']}-*.sqlite")
    assert len(list(again)) == len(index), "and builds no other"


def test_answers_report_is_consistent_with_its_records(inputs):
    folder, common = inputs
    report = run_eval(folder, common, "answers")
    records = report["records"]
    assert len(records) == len(QUESTIONS)
    answers = {qid: a for qid, _, a, _ in QUESTIONS}
    for r in records:
        if r["kind"] == "answerable":
            assert r["correct"] == (
                not r["refused"] and contains_answer(r["answer"], answers[r["qid"]])
            )
        if r["refused"]:
            assert "citation" not in r
    refusal = precision_recall_f1(
        [r["refused"] for r in records], [r["kind"] == "unanswerable" for r in records]
    )
    assert report["refusal"]["f1"] == pytest.approx(refusal.f1)
    assert report["retrieval"]["gold_in_prompt"] == 1.0
    assert report["latency_ms"]["total_ms"]["p99"] >= report["latency_ms"]["total_ms"]["p50"]


def test_chunking_compares_sizes_and_chooses_by_its_rule(inputs):
    folder, common = inputs
    report = run_eval(folder, common, "chunking", "--sizes", "16,32", "--group", "3")
    sizes = report["sizes"]
    assert set(sizes) == {"16", "32"}
    assert sizes["16"]["tokens_per_chunk"] < sizes["32"]["tokens_per_chunk"]
    best_mrr = max(r["mrr"] for r in sizes.values())
    best_answer = max(r["answer_in_top5"] for r in sizes.values())
    expected = min(
        int(s)
        for s, r in sizes.items()
        if r["mrr"] >= best_mrr - 0.01 and r["answer_in_top5"] >= best_answer - 0.01
    )
    assert report["choice"]["chunk_size"] == expected
    assert report["meta"]["documents"] == 2, "six articles in groups of three"


def test_chunking_rejects_bad_sizes(inputs):
    _, common = inputs
    result = subprocess.run(
        [sys.executable, "-m", "ragserve", "eval", "chunking", *common, "--sizes", "64,big"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "--sizes must be integers" in result.stderr


def test_safety_suites_find_no_leak(inputs):
    folder, common = inputs
    report = run_eval(
        folder, common, "safety", "--cases", "2", "--memos", "2", "--timing-asks", "3"
    )
    access = report["access"]["summary"]
    assert access["leaks"] == 0, report["access"]["leaks"]
    assert access["authorized_saw_memo"] == 1.0, "the board member does reach the memos"
    assert access["unauthorized_asks"] == 3 * 2 + 2, "three outsiders per memo, then two after"
    injection = report["injection"]["summary"]
    assert set(injection) == {"spotlighting", "no spotlighting", "control: asked directly"}
    assert all(s["cases"] == 2 for s in injection.values())
    timing = report["access"]["refusal_timing"]
    assert timing["forbidden"]["asks"] == timing["missing"]["asks"] == 3
    assert timing["forbidden"]["p50"] > 0 and timing["missing"]["p50"] > 0


def test_calibrate_fits_and_saves_an_answerability_model(inputs):
    from ragserve.rag.answerability import Answerability

    folder, common = inputs
    saved = folder / "answerability.json"
    report = run_eval(folder, common, "calibrate", "--folds", "2", "--save-to", str(saved))
    assert len(report["signals"]) == len(QUESTIONS)
    assert 0.0 <= report["figures"]["cv_auc"] <= 1.0
    model = Answerability.load(saved)
    assert model.features == tuple(report["model"]["features"])
    assert model.reader_model == "all-mpnet-base-v2"
    assert 0.0 <= model.refuse_below <= 1.0
    # The threshold is the median of the best thresholds of the folds' 20 draws.
    low, high = report["figures"]["thresholds"]
    assert report["figures"]["repeats"] == 20 and low <= model.refuse_below <= high
    signals = report["signals"][0]
    assert 0.0 <= model.probability(signals) <= 1.0
