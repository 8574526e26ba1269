"""The JSON schema a constraint is compiled from: the request's, with the defaults that keep
output inside it (OpenAI's strict mode, xgrammar's strict mode).

- An object schema that lists `properties` admits no others unless it says so
  (`additionalProperties`, `patternProperties` or `unevaluatedProperties`). JSON Schema's own
  default admits any extra property, and a grammar that follows it lets a model wander into
  undeclared keys until max_tokens cuts the object off.
- An integer without bounds is held to JSON's interoperable range, ±(2^53 - 1) (RFC 7493): a
  number past it does not survive a double, and without an end a model can write digits until
  max_tokens does.

An object schema without `properties` (`{"type": "object"}`) stays open: it declares nothing.
Nor is an object that is composed with others (`allOf`, `anyOf`, `oneOf`, `$ref` beside its
`properties`) closed: its properties may come from them.
"""

import json
from typing import Any

SAFE_INTEGER = 2**53 - 1
OPEN_OBJECT_KEYS = ("additionalProperties", "patternProperties", "unevaluatedProperties")
# An object composed with others may get properties from them, which additionalProperties
# would forbid (it sees only its own schema's properties): such objects are left as they are.
COMPOSING_KEYS = ("allOf", "anyOf", "oneOf", "$ref")
# Keywords whose value is a schema, a list of schemas, or a map of names to schemas.
ONE_SCHEMA = ("additionalProperties", "items", "not", "if", "then", "else", "contains")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")


def strict_schema(schema: Any) -> Any:
    """A copy of the schema with the defaults above applied wherever they are missing."""
    if not isinstance(schema, dict):
        return schema
    result = dict(schema)
    if (
        "properties" in result
        and not any(key in result for key in OPEN_OBJECT_KEYS)
        and not any(key in result for key in COMPOSING_KEYS)
    ):
        result["additionalProperties"] = False
    types = result.get("type")
    if types == "integer" or (isinstance(types, list) and "integer" in types):
        if "minimum" not in result and "exclusiveMinimum" not in result:
            result["minimum"] = -SAFE_INTEGER
        if "maximum" not in result and "exclusiveMaximum" not in result:
            result["maximum"] = SAFE_INTEGER
    for key in ONE_SCHEMA:
        if isinstance(result.get(key), dict):
            result[key] = strict_schema(result[key])
    for key in SCHEMA_LISTS:
        if isinstance(result.get(key), list):
            result[key] = [strict_schema(item) for item in result[key]]
    for key in SCHEMA_MAPS:
        if isinstance(result.get(key), dict):
            result[key] = {name: strict_schema(s) for name, s in result[key].items()}
    return result


def strict_schema_text(spec: str) -> str:
    """strict_schema of a schema given as JSON text (text that is not JSON is left for the
    compiler to refuse)."""
    try:
        schema = json.loads(spec)
    except ValueError:
        return spec
    return json.dumps(strict_schema(schema))
