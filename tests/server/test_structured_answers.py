"""Schema answers (response_format) on /v1/answers and the +rag chat model: JSON the client's
schema allows, every stating value cited, and a refusal rather than a value no source holds."""

import json

import httpx
import openai
import pydantic
import pytest

from ragserve.rag.answer_result import REFUSALS
from tests.server.test_answers import MODEL, SECRET, SECRET_FACTS, ask, rag  # noqa: F401

YEAR = {
    "type": "json_schema",
    "json_schema": {
        "name": "built",
        "schema": {
            "type": "object",
            "properties": {"year": {"type": "integer"}},
            "required": ["year"],
        },
    },
}
LAUNCH = {
    "type": "json_schema",
    "json_schema": {
        "name": "launch",
        "schema": {
            "type": "object",
            "properties": {"date": {"type": "string"}, "budget_millions": {"type": "number"}},
            "required": ["date", "budget_millions"],
        },
    },
}


def post(server, key, body) -> httpx.Response:
    return httpx.post(
        server.url + "/v1/answers",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=300,
    )


def test_a_schema_answer_is_json_with_each_value_cited(server, rag):  # noqa: F811
    question = "In which year was the Old Harbour lighthouse built?"
    response = post(server, rag["staff"], {"question": question, "response_format": YEAR})
    answer = response.json()
    assert answer["mode"] == "generated", answer
    assert answer["value"] == {"year": 1874} and json.loads(answer["answer"]) == answer["value"]
    (n,) = answer["field_citations"]["/year"]
    (citation,) = [c for c in answer["citations"] if c["n"] == n]
    assert citation["doc_id"] == rag["ids"]["lighthouse"] and "1874" in citation["quote"]
    # The same question without a schema is another cache entry: a quoted text answer.
    text, _ = ask(server, rag["staff"], question)
    assert text["value"] is None and text["mode"] == "extractive"


def test_restricted_facts_never_fill_a_schema(server, rag):  # noqa: F811
    body = {"question": "When does Project Falcon launch and what is its budget?"}
    for stream in (False, True):
        with httpx.stream(
            "POST",
            server.url + "/v1/answers",
            json=body | {"response_format": LAUNCH, "stream": stream},
            headers={"Authorization": f"Bearer {rag['staff']}"},
            timeout=300,
        ) as response:
            raw = response.read().decode()
        assert response.status_code == 200, raw
        for leak in (rag["ids"]["secret"], *SECRET_FACTS, "Falcon plan"):
            assert leak not in raw
        events = [line[6:] for line in raw.splitlines() if line.startswith("data: {")]
        last = json.loads(events[-1] if stream else raw)
        assert last["refused"] and last["value"] is None and last["answer"] in REFUSALS.values()


def test_a_bad_schema_is_a_400_even_when_the_answer_would_be_refused(server, rag):  # noqa: F811
    bad = {"type": "json_schema", "json_schema": {"schema": {"type": "strin"}}}
    response = post(
        server, rag["staff"], {"question": "Who painted Guernica?", "response_format": bad}
    )
    assert response.status_code == 400 and "strin" in response.json()["error"]["message"]


def test_a_schema_too_long_for_the_prompt_is_a_400(server, rag):  # noqa: F811
    fields = {f"field_{i}": {"type": "string", "description": "x " * 40} for i in range(400)}
    huge = {"type": "json_schema", "json_schema": {"schema": {"properties": fields}}}
    question = "In which year was the Old Harbour lighthouse built?"
    response = post(server, rag["staff"], {"question": question, "response_format": huge})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "context_length_exceeded"


class Built(pydantic.BaseModel):
    year: int


def test_the_rag_model_parses_into_a_pydantic_model_or_refuses(server, rag):  # noqa: F811
    api = openai.OpenAI(base_url=server.url + "/v1", api_key=rag["staff"], max_retries=0)

    def parse(question: str):
        reply = api.chat.completions.parse(
            model=MODEL + "+rag",
            messages=[{"role": "user", "content": question}],
            response_format=Built,
        )
        return reply.choices[0].message

    built = parse("In which year was the Old Harbour lighthouse built?")
    assert built.parsed == Built(year=1874) and built.refusal is None
    refused = parse("In which year does Project Falcon launch the drone?")
    assert refused.parsed is None and refused.refusal in REFUSALS.values()
    assert SECRET[:20] not in refused.model_dump_json()
    with pytest.raises(openai.BadRequestError, match="regex"):
        api.chat.completions.create(
            model=MODEL + "+rag",
            messages=[{"role": "user", "content": "When was the lighthouse built?"}],
            extra_body={"structured_outputs": {"regex": "[0-9]{4}"}},
        )
