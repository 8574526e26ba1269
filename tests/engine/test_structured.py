"""Structured output in the engine: constrained sequences always match, free ones in the same
batch are untouched, and a constraint that does not compile is refused before it runs."""

import json
import re

import pytest
from pydantic import BaseModel

from ragserve.engine.errors import InvalidRequestError
from ragserve.engine.sampling_params import SamplingParams
from ragserve.engine.structured import OutputConstraint


class Invoice(BaseModel):
    vendor: str
    amount: float
    paid: bool


def chat(llm, text: str) -> str:
    return llm.apply_chat_template([{"role": "user", "content": text}])


def constrained(kind: str, spec: object, **params: object) -> SamplingParams:
    text = spec if isinstance(spec, str) else json.dumps(spec)
    settings = {"max_tokens": 96, "temperature": 0.0} | params
    return SamplingParams(constraint=OutputConstraint(kind, text), **settings)


def test_a_json_schema_is_always_met(llm_fp32):
    schema = Invoice.model_json_schema()
    prompts = [
        chat(llm_fp32, "Acme billed us 120 euros for paper; we paid. Give the invoice as JSON."),
        chat(llm_fp32, "Write a haiku about the sea."),  # nothing to do with the schema
    ]
    params = [constrained("json", schema), constrained("json", schema, temperature=1.0, seed=3)]
    for output in llm_fp32.generate(prompts * 2, params * 2):
        completion = output.outputs[0]
        assert completion.finish_reason == "stop", completion
        Invoice.model_validate_json(completion.text)


def test_regex_and_choice(llm_fp32):
    prompt = chat(llm_fp32, "What is the phone number of the office?")
    phone, choice = llm_fp32.generate(
        [prompt, chat(llm_fp32, "Is the sky green?")],
        [constrained("regex", r"\d{3}-\d{4}"), constrained("choice", ["yes", "no", "unsure"])],
    )
    assert re.fullmatch(r"\d{3}-\d{4}", phone.outputs[0].text)
    assert choice.outputs[0].text in {"yes", "no", "unsure"}
    assert choice.outputs[0].finish_reason == "stop"


def test_a_free_sequence_is_untouched_by_a_constrained_neighbour(llm_fp32):
    free = SamplingParams(max_tokens=24, temperature=0, batch_invariant=True)
    prompt = chat(llm_fp32, "Name three rivers.")
    alone = llm_fp32.generate(prompt, free)[0].outputs[0].token_ids
    schema = Invoice.model_json_schema()
    mixed = llm_fp32.generate(
        [chat(llm_fp32, "An invoice, please."), prompt],
        [constrained("json", schema, batch_invariant=True), free],
    )
    assert mixed[1].outputs[0].token_ids == alone
    Invoice.model_validate_json(mixed[0].outputs[0].text)


@pytest.mark.parametrize(
    ("kind", "spec", "reason"),
    [
        ("json", '{"type": "nosuch"}', "nosuch"),
        ("json", "{not json", "json"),
        ("regex", "(unclosed", "unclosed"),
        ("grammar", "start: missing_rule", "missing_rule"),
    ],
)
def test_a_constraint_that_does_not_compile_is_refused_with_its_reason(
    llm_fp32, kind, spec, reason
):
    with pytest.raises(InvalidRequestError, match=f"invalid {kind} constraint") as refused:
        llm_fp32.engine.add_request("Hello", constrained(kind, spec))
    assert reason in str(refused.value).lower()
    assert not llm_fp32.engine.has_unfinished_requests()


def test_min_tokens_and_a_constraint_are_refused_together():
    # A complete match allows nothing but EOS, which min_tokens would forbid.
    with pytest.raises(InvalidRequestError, match="min_tokens"):
        constrained("regex", "a", min_tokens=3)
