"""Feedback and the query history over HTTP: every answer has an id its asker (only) may rate;
the history is for the tenant's administrators alone, askers hashed; the export is a dataset
`ragserve eval answers` runs on."""

import json
import subprocess
import sys

import httpx
import pytest

from ragserve.access import Role
from ragserve.eval.dataset import load_dataset

FACTS = {
    "Harbor lease": "The Harbor office lease runs until June 2031 and costs 84,000 euros a year.",
    "Fleet policy": "Company cars are replaced every four years or after 160,000 kilometres.",
}


@pytest.fixture(scope="module")
def people(server):
    return {
        "writer": server.key("hana", ("ops",), role=Role.WRITER),
        "asker": server.key("ines", ("ops",)),
        "other": server.key("ivo", ("ops",)),
        "admin": server.key("root", (), role=Role.ADMIN),
        "other_admin": server.key("root", (), tenant="globex", role=Role.ADMIN),
    }


def call(server, key: str, method: str, path: str, **kwargs) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.request(method, server.url + path, headers=headers, timeout=120, **kwargs)


@pytest.fixture(scope="module")
def answered(server, people) -> dict[str, dict]:
    for title, text in FACTS.items():
        body = {"text": text, "title": title, "acl": {"groups": ["ops"]}}
        assert call(server, people["writer"], "POST", "/v1/documents", json=body).status_code == 201
    questions = {
        "lease": "Until when does the Harbor office lease run?",
        "cars": "How often are company cars replaced?",
        "moon": "Who painted the moon base murals?",
    }
    replies = {}
    for name, question in questions.items():
        reply = call(server, people["asker"], "POST", "/v1/answers", json={"question": question})
        assert reply.status_code == 200, reply.text
        replies[name] = reply.json()
    return replies


def test_the_asker_rates_their_own_answer(server, people, answered):
    answer_id = answered["lease"]["id"]
    assert answer_id.startswith("ans-")
    path = f"/v1/answers/{answer_id}/feedback"
    rated = call(server, people["asker"], "POST", path, json={"rating": "down", "reason": "old"})
    assert rated.status_code == 200, rated.text
    assert rated.json() == {
        "id": answer_id,
        "object": "answer.feedback",
        "rating": "down",
        "reason": "old",
        "expected": None,
    }
    again = call(server, people["asker"], "POST", path, json={"rating": "up"})
    assert again.json()["rating"] == "up"
    for key in (people["other"], people["other_admin"]):
        assert call(server, key, "POST", path, json={"rating": "down"}).status_code == 404
    unknown = call(
        server, people["asker"], "POST", "/v1/answers/ans-nope/feedback", json={"rating": "up"}
    )
    assert unknown.status_code == 404
    for body in ({"rating": "meh"}, {"rating": "up", "stars": 5}, {}):
        assert call(server, people["asker"], "POST", path, json=body).status_code == 400


def test_history_is_for_the_tenants_administrators(server, people, answered):
    assert call(server, people["asker"], "GET", "/v1/history").status_code == 403
    page = call(server, people["admin"], "GET", "/v1/history?limit=2").json()
    assert len(page["data"]) == 2 and page["has_more"]
    rest = call(server, people["admin"], "GET", f"/v1/history?before={page['last_id']}").json()
    entries = {e["id"]: e for e in page["data"] + rest["data"]}
    lease = entries[answered["lease"]["id"]]
    assert lease["question"] == "Until when does the Harbor office lease run?"
    assert lease["answer"] == answered["lease"]["answer"] and lease["rating"] == "up"
    assert lease["latency_ms"] > 0 and lease["citations"][0]["title"] == "Harbor lease"
    assert lease["user"] != "ines" and len(lease["user"]) == 24, "askers are hashed"
    assert entries[answered["cars"]["id"]]["user"] == lease["user"]
    other = call(server, people["other_admin"], "GET", "/v1/history").json()
    assert not set(entries) & {e["id"] for e in other["data"]}


def test_the_export_runs_in_eval_answers(server, people, answered, tmp_path):
    cars, moon, lease = answered["cars"], answered["moon"], answered["lease"]
    call(
        server,
        people["asker"],
        "POST",
        f"/v1/answers/{lease['id']}/feedback",
        json={"rating": "up"},
    )
    expected = {"rating": "down", "expected": "every four years"}
    call(server, people["asker"], "POST", f"/v1/answers/{cars['id']}/feedback", json=expected)
    if moon["refused"]:
        call(
            server,
            people["asker"],
            "POST",
            f"/v1/answers/{moon['id']}/feedback",
            json={"rating": "up"},
        )
    exported = call(server, people["admin"], "GET", "/v1/history/export")
    assert exported.status_code == 200
    dataset = tmp_path / "exported.jsonl"
    dataset.write_text(exported.text)
    items = {item.qid: item for item in load_dataset(dataset)}
    assert items[cars["id"]].answers == ("every four years",)
    assert items[cars["id"]].gold_doc == cars["citations"][0]["title"]
    assert items[answered["lease"]["id"]].answers == (answered["lease"]["answer"],)
    csv_export = call(server, people["admin"], "GET", "/v1/history/export?format=csv")
    assert csv_export.text.splitlines()[0] == "qid,question,answers,gold_doc,kind,type,history"
    assert call(server, people["other_admin"], "GET", "/v1/history/export").text == ""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": t, "title": t, "text": x}) + "\n" for t, x in FACTS.items())
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragserve",
            "eval",
            "answers",
            "--dataset",
            str(dataset),
            "--corpus",
            str(corpus),
            "--out",
            str(tmp_path / "report"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout[run.stdout.index("{") :])
    summary = report.get("summary", report)
    assert summary["questions"] == len(items)
    assert summary["retrieval"]["gold_in_prompt"] == 1.0, "gold_doc names a corpus document"
