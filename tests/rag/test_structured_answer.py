import json

from ragserve.rag.citations import CitationChecker
from ragserve.rag.documents import ScoredChunk
from ragserve.rag.prompt import DATAMARK, PromptSource
from ragserve.rag.structured_answer import answer_schema, check_value, parse_json

LIGHTHOUSE = "The Old Harbour lighthouse was built in 1874 by the engineer Thomas Brand."
LAMP = "Its lamp can be seen from 1,500 metres away and burns paraffin."
SOURCES = [
    PromptSource(
        1, ScoredChunk("c1", "d1", "Lighthouse", "s", 0, 0, len(LIGHTHOUSE), LIGHTHOUSE, 1)
    ),
    PromptSource(2, ScoredChunk("c2", "d1", "Lighthouse", "s", 1, 80, 80 + len(LAMP), LAMP, 1)),
]
QUESTION = "Who built the Old Harbour lighthouse, and when?"
CHECKER = CitationChecker(threshold=0.6)


def check(data):
    return check_value(data, QUESTION, SOURCES, CHECKER)


def test_every_stating_value_is_cited_by_the_source_that_holds_it():
    checked = check({"builder": "Thomas Brand", "year": 1874, "range_m": 1500.0})
    assert checked.supported
    assert checked.field_citations == {"/builder": [1], "/year": [1], "/range_m": [2]}
    assert [c.n for c in checked.citations] == [1, 2]
    assert checked.citations[0].quote == LIGHTHOUSE


def test_one_invented_value_refuses_the_whole_answer():
    assert not check({"builder": "Thomas Brand", "year": 1875}).supported
    assert not check({"builder": "Gustave Eiffel", "year": 1874}).supported
    # A name whose words occur apart in the sources is not the source's name.
    assert not check({"builder": "Brand Thomas Harbour Engineer"}).supported


def test_values_that_state_nothing_need_no_source_but_one_value_must_be_cited():
    checked = check(
        {"name": "Old Harbour lighthouse", "standing": True, "note": None, "by": "Brand"}
    )
    assert checked.supported and checked.field_citations == {"/by": [1]}
    assert not check({"name": "Old Harbour lighthouse", "standing": True}).supported
    assert not check({}).supported


def test_markers_and_datamarks_leave_the_values_and_markers_choose_the_source():
    checked = check({"builder": f"Thomas{DATAMARK}Brand [1]", "items": ["paraffin [2]"]})
    assert checked.value == {"builder": "Thomas Brand", "items": ["paraffin"]}
    assert checked.field_citations == {"/builder": [1], "/items/0": [2]}
    # A marker naming a source that does not hold the claim is not moved to one that does.
    assert not check({"builder": "Thomas Brand [2]"}).supported


def test_pointers_escape_keys_and_a_sentence_list_is_checked_sentence_by_sentence():
    checked = check({"a/b~c": "Thomas Brand built it in 1874. It burns paraffin."})
    assert checked.supported and checked.field_citations == {"/a~1b~0c": [1, 2]}
    assert not check({"story": "Thomas Brand built it in 1874. It burns whale oil."}).supported


def test_objects_that_leave_more_properties_unsaid_are_closed():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}},
        "$defs": {"open": {"properties": {}, "additionalProperties": True}},
        "anyOf": [{"properties": {"c": {"type": "integer"}}}],
    }
    # A property named "properties" is a name, not a keyword.
    schema["properties"]["properties"] = {"type": "object", "properties": {}}
    closed = json.loads(answer_schema(json.dumps(schema), set()))
    assert closed["additionalProperties"] is False
    assert closed["properties"]["a"]["additionalProperties"] is False
    assert closed["$defs"]["open"]["additionalProperties"] is True
    assert closed["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in closed["properties"]
    assert closed["properties"]["properties"]["additionalProperties"] is False


def test_numbers_are_held_to_those_of_the_evidence_where_any_fits():
    schema = {
        "type": "object",
        "properties": {
            "year": {"type": "integer"},
            "range": {"type": ["number", "null"]},
            "unit": {"enum": ["m", "km"]},
            "grade": {"type": "integer", "const": 3},
            "mixed": {"type": ["number", "string"]},
        },
    }
    allowed = {1874.0, 1500.0, 6.3}
    narrowed = json.loads(answer_schema(json.dumps(schema), allowed))["properties"]
    assert narrowed["year"]["enum"] == [1500, 1874]
    assert narrowed["range"]["enum"] == [6.3, 1500, 1874, None]
    assert narrowed["unit"]["enum"] == ["m", "km"] and narrowed["grade"] == {
        "type": "integer",
        "const": 3,
    }
    assert "enum" not in narrowed["mixed"]
    # No fitting number: the field stays open (and the check refuses what no source holds).
    assert "enum" not in json.loads(answer_schema(json.dumps(schema), {6.3}))["properties"]["year"]


def test_text_cut_off_by_the_token_limit_is_no_answer():
    assert parse_json('{"answer": "The lamp') is None
    assert parse_json('{"answer": 1}') == {"answer": 1}
