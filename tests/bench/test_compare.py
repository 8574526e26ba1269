"""`ragserve bench compare`: the plan of rounds, the medians, and refused parameters."""

import pytest
from typer.testing import CliRunner

from ragserve.bench.compare import cells, medians
from ragserve.cli import app


def test_rounds_alternate_the_order_and_every_cell_has_its_own_prompts():
    planned = cells(["ours", "theirs"], [1, 8, 32], 3, 2, 4, 0)
    assert [(c.round, c.concurrency) for c in planned[:3]] == [(1, 1), (1, 8), (1, 32)]
    assert [c.order for c in planned[::3]] == [
        ("ours", "theirs"),
        ("theirs", "ours"),
        ("ours", "theirs"),
    ]
    assert [c.requests for c in planned[:3]] == [4, 16, 64]
    assert len({c.seed for c in planned}) == len(planned) == 9


def record(round_number: int, concurrency: int, ours: float, theirs: float) -> dict:
    def run(throughput: float) -> dict:
        return {"output_token_throughput": throughput}

    return {
        "round": round_number,
        "concurrency": concurrency,
        "runs": {"ours": run(ours), "theirs": run(theirs)},
    }


def test_medians_take_the_ratio_within_each_round_then_the_median():
    records = [record(1, 8, 150, 100), record(2, 8, 90, 100), record(3, 8, 300, 100)]
    records.append(record(1, 1, 50, 0))
    table = medians(records, ["ours", "theirs"])
    assert table[8]["throughput"] == {"ours": 150, "theirs": 100}
    assert table[8]["ratio"]["theirs"] == {"median": 1.5, "low": 0.9, "high": 3.0}
    # A server that produced nothing leaves an infinite ratio, not a crash.
    assert table[1]["ratio"]["theirs"]["median"] == float("inf")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--server", "a=http://127.0.0.1:9"], "two servers or more"),
        (["--server", "a=http://127.0.0.1:9", "--server", "http://x"], "expected NAME=VALUE"),
        (["--server", "a=http://h:9", "--server", "a=http://h:8"], "'a' given twice"),
        (
            ["--server", "a=http://h:9", "--server", "b=http://h:8", "--api-key", "c=k"],
            "no --server named c",
        ),
        (["--server", "a=http://h:9", "--server", "b=http://h:8", "--concurrency", "1,x"], "N,N"),
        (["--server", "a=http://h:9", "--server", "b=http://h:8", "--rounds", "0"], "positive"),
        (
            ["--server", "a=http://h:9", "--server", "b=http://h:8", "--temperature", "3"],
            "--temperature",
        ),
        (
            ["--server", "a=http://127.0.0.1:9", "--server", "b=http://127.0.0.1:9"],
            "cannot list the models of http://127.0.0.1:9",
        ),
    ],
)
def test_bad_parameters_are_refused_before_any_request(args, message):
    # In this process: a new one would spend seconds importing the stack for each case.
    result = CliRunner().invoke(app, ["bench", "compare", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())
