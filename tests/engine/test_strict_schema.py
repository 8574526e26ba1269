"""The defaults a JSON schema constraint gets (strict_schema.py), and what the compiled grammar
then accepts, read token by token with the default model's tokenizer."""

import json

import pytest
from transformers import AutoTokenizer

from ragserve.engine.config import DEFAULT_MODEL
from ragserve.engine.loader import resolve_model
from ragserve.engine.strict_schema import SAFE_INTEGER, strict_schema
from ragserve.engine.structured import Grammars, OutputConstraint

CITY = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "population": {"type": "integer"},
        "districts": {"type": "array", "items": {"type": "object", "properties": {}}},
    },
    "required": ["name", "population"],
}


def test_declared_objects_are_closed_and_integers_bounded():
    strict = strict_schema(CITY)
    assert strict["additionalProperties"] is False
    assert strict["properties"]["districts"]["items"]["additionalProperties"] is False
    population = strict["properties"]["population"]
    assert (population["minimum"], population["maximum"]) == (-SAFE_INTEGER, SAFE_INTEGER)
    assert "additionalProperties" not in CITY, "the request's schema is not changed"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},
        {"type": "object", "properties": {"a": {}}, "additionalProperties": True},
        {"type": "object", "properties": {"a": {}}, "patternProperties": {"^x": {}}},
        {"properties": {"a": {}}, "allOf": [{"properties": {"b": {}}}]},
        {"type": "integer", "minimum": 0, "exclusiveMaximum": 10},
    ],
)
def test_what_the_schema_says_itself_is_kept(schema):
    strict = strict_schema(schema)
    assert strict.get("additionalProperties") == schema.get("additionalProperties")
    if "minimum" in schema:
        assert strict == schema


def test_defs_and_any_of_are_reached():
    schema = {
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "anyOf": [{"$ref": "#/$defs/Point"}, {"type": "object", "properties": {"y": {}}}],
    }
    strict = strict_schema(schema)
    assert strict["$defs"]["Point"]["additionalProperties"] is False
    assert strict["$defs"]["Point"]["properties"]["x"]["maximum"] == SAFE_INTEGER
    assert strict["anyOf"][1]["additionalProperties"] is False


@pytest.fixture(scope="module")
def grammars():
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL))
    return tokenizer, Grammars(tokenizer, len(tokenizer), {tokenizer.eos_token_id})


def accepts(grammars, schema: dict, text: str) -> bool:
    tokenizer, compiled = grammars
    matcher = compiled.matcher(OutputConstraint("json", json.dumps(schema)))
    tokens = tokenizer.encode(text, add_special_tokens=False)
    return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()


def test_the_grammar_refuses_undeclared_properties_and_endless_integers(grammars):
    assert accepts(grammars, CITY, '{"name":"Oslo","population":709037}')
    assert not accepts(grammars, CITY, '{"name":"Oslo","population":709037,"zip_codes":[1]}')
    assert not accepts(grammars, CITY, '{"name":"Oslo","population":' + "9" * 20 + "}")
    opened = {**CITY, "additionalProperties": True}
    assert accepts(grammars, opened, '{"name":"Oslo","population":1,"zip_codes":[1]}')
