"""Schema answers: the model fills the client's JSON schema from the numbered evidence (the
grammar holds it to the schema), and every value that states something is checked against the
sources the way a sentence of a text answer is.

A value states something when it is a number, or a string with a content word, that the
question does not already give. A number is supported by a source holding it as written there
("1,500" for 1500); a string by the checker's rule for sentences, each of its sentences (its
[n] markers, if the model wrote any, choose among the sources and are then removed). Booleans,
nulls and values that only restate the question state nothing a source could confirm and need
none. The answer stands when every stating value is supported and at least one is; otherwise it
is refused, worded as any refusal: no quote of the evidence fits a client's schema.

Before generation the schema is narrowed, so that every reply still fits the client's schema
and a small model cannot wander where the check would refuse it anyway: an object that does not
say whether it takes more properties is closed (additionalProperties: false; the 135M model
filled open ones with keys copied from the schema text, "required": [...], until the token
limit cut it off), and a number may only be one the evidence or the question holds (digits are
single tokens for it, and "120" went on as "120.000000..." to the limit).
"""

import json
from dataclasses import dataclass, field
from typing import Any

from ragserve.rag.citations import Citation, CitationChecker, citation
from ragserve.rag.prompt import DATAMARK, PromptSource
from ragserve.rag.sentences import SENTENCE
from ragserve.rag.text import CITATION, content_words, numbers

Supporters = list[tuple[int, float]]


@dataclass
class CheckedValue:
    # The value with [n] markers taken out of its strings.
    value: Any
    citations: list[Citation] = field(default_factory=list)
    # JSON pointer of each supported value -> the numbers of the sources that support it.
    field_citations: dict[str, list[int]] = field(default_factory=dict)
    supported: bool = True


# Keywords whose value maps names to schemas (the map itself is not a schema).
SCHEMA_MAPS = frozenset(
    ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"]
)


def answer_schema(schema: str, allowed_numbers: set[float]) -> str:
    """The client's schema as the answer is generated under: objects that leave
    additionalProperties unsaid are closed, and numbers are held to allowed_numbers (those of
    the evidence and the question) where any fits."""

    def close(node: Any) -> Any:
        if isinstance(node, list):
            return [close(item) for item in node]
        if not isinstance(node, dict):
            return node
        closed = {
            key: {name: close(sub) for name, sub in value.items()}
            if key in SCHEMA_MAPS and isinstance(value, dict)
            else close(value)
            for key, value in node.items()
        }
        if "properties" in node and "additionalProperties" not in node:
            closed["additionalProperties"] = False
        choices = _number_choices(node, allowed_numbers)
        if choices:
            closed["enum"] = choices
        return closed

    return json.dumps(close(json.loads(schema)))


def _number_choices(node: dict[str, Any], allowed: set[float]) -> list[float | int | None]:
    """The allowed numbers a schema node of numeric type may take (none when it is not
    numeric, already chooses its values, or no allowed number fits)."""
    kinds = node.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if not isinstance(kinds, list) or "enum" in node or "const" in node:
        return []
    numeric = [k for k in kinds if k != "null"]
    if not numeric or not set(numeric) <= {"number", "integer"}:
        return []
    whole = numeric == ["integer"]
    fitting = sorted(n for n in allowed if n.is_integer() or not whole)
    choices: list[float | int | None] = [int(n) if n.is_integer() else n for n in fitting]
    return [*choices, None] if choices and "null" in kinds else choices


def evidence_numbers(question: str, sources: list[PromptSource]) -> set[float]:
    return set().union(_numbers(question), *(_numbers(s.chunk.text) for s in sources))


def parse_json(text: str) -> Any | None:
    """The model's JSON, or None when it is not JSON (cut off by the token limit)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def check_value(
    value: Any, question: str, sources: list[PromptSource], checker: CitationChecker
) -> CheckedValue:
    by_n = {s.n: s.chunk for s in sources}
    held = {n: _numbers(chunk.text) for n, chunk in by_n.items()}
    checked = CheckedValue(None)
    cited: dict[int, Citation] = {}

    def record(pointer: str, claim: str, supporters: Supporters) -> None:
        if not supporters:
            checked.supported = False
            return
        checked.field_citations[pointer] = sorted({n for n, _ in supporters})
        for n, score in supporters:
            if n not in cited or cited[n].support < score:
                cited[n] = citation(n, by_n[n], claim, score)

    def visit(value: Any, pointer: str) -> Any:
        if isinstance(value, dict):
            return {k: visit(v, f"{pointer}/{_escaped(k)}") for k, v in value.items()}
        if isinstance(value, list):
            return [visit(v, f"{pointer}/{i}") for i, v in enumerate(value)]
        if isinstance(value, str):
            plain = _clean(value)
            claims = [s for s in _sentences(value) if _states(s[0], question)]
            if claims:
                supporters: Supporters = []
                for sentence, markers in claims:
                    found = checker.supporters(sentence, markers, question, by_n)
                    if not found:
                        supporters = []
                        break
                    supporters += found
                record(pointer, plain, supporters)
            return plain
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        if is_number and float(value) not in _numbers(question):
            holding = [(n, 1.0) for n, numbers_of in held.items() if value in numbers_of]
            record(pointer, str(value), holding[:1])
        return value

    checked.value = visit(value, "")
    checked.citations = sorted(cited.values(), key=lambda c: c.n)
    checked.supported = checked.supported and bool(cited)
    return checked


def _sentences(text: str) -> list[tuple[str, list[int]]]:
    """Each sentence of a string value without its markers, and the markers it carried."""
    found = []
    for match in SENTENCE.finditer(text):
        plain = _clean(match.group())
        if plain:
            found.append((plain, [int(n) for n in CITATION.findall(match.group())]))
    return found


def _clean(text: str) -> str:
    """Text without the model's [n] markers and the datamarks it copied from the evidence."""
    return CITATION.sub("", text.replace(DATAMARK, " ")).strip()


def _states(text: str, question: str) -> bool:
    return bool(content_words(text) - content_words(question))


def _numbers(text: str) -> set[float]:
    values = set()
    for written in numbers(text):
        try:
            values.add(float(written))
        except ValueError:  # "1.2.3": a version or a date, not one number
            continue
    return values


def _escaped(key: str) -> str:
    """A key as a JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
