"""The request bodies of structured output and tool calls: OpenAI's response_format, vLLM's
structured_outputs, and the tools a chat may call; each says what the output must match."""

import json
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ragserve.engine.structured import OutputConstraint
from ragserve.server.lenient import Lenient, refuse_if


class JsonSchemaFormat(Lenient):
    name: str = "response"
    description: str | None = None
    # "schema" would shadow a BaseModel method.
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(Lenient):
    """OpenAI's response_format: free text, any JSON object, or JSON matching a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def schema_given(self) -> "ResponseFormat":
        refuse_if(
            self.type == "json_schema" and self.json_schema is None,
            "response_format of type json_schema needs json_schema.schema",
        )
        return self

    def constraint(self) -> OutputConstraint | None:
        if self.type == "json_object":
            return OutputConstraint("json", json.dumps({"type": "object"}))
        if self.type == "json_schema" and self.json_schema is not None:
            return OutputConstraint("json", json.dumps(self.json_schema.json_schema))
        return None


class StructuredOutputs(Lenient):
    """vLLM's structured_outputs: exactly one of a JSON schema, a regular expression, a list of
    choices or a Lark grammar."""

    json_: dict[str, Any] | str | None = Field(None, alias="json")
    regex: str | None = None
    choice: list[str] | None = Field(None, min_length=1)
    grammar: str | None = None

    @model_validator(mode="after")
    def exactly_one(self) -> "StructuredOutputs":
        given = [n for n in ("json_", "regex", "choice", "grammar") if getattr(self, n) is not None]
        refuse_if(
            len(given) != 1, "structured_outputs takes exactly one of json, regex, choice, grammar"
        )
        return self

    def constraint(self) -> OutputConstraint:
        if self.json_ is not None:
            schema = self.json_ if isinstance(self.json_, str) else json.dumps(self.json_)
            return OutputConstraint("json", schema)
        if self.regex is not None:
            return OutputConstraint("regex", self.regex)
        if self.choice is not None:
            return OutputConstraint("choice", json.dumps(self.choice))
        return OutputConstraint("grammar", self.grammar or "")


class FunctionCall(Lenient):
    name: str
    # The arguments as JSON text, as OpenAI sends them.
    arguments: str

    @field_validator("arguments")
    @classmethod
    def json_object(cls, value: str) -> str:
        try:
            parsed = json.loads(value or "{}")
        except json.JSONDecodeError as error:
            raise ValueError(f"tool call arguments must be JSON: {error}") from error
        refuse_if(not isinstance(parsed, dict), "tool call arguments must be a JSON object")
        return value


class ToolCallIn(Lenient):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionSpec(Lenient):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    # A JSON schema of the arguments; none: any object.
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Lenient):
    type: Literal["function"]
    function: FunctionSpec


class ToolName(Lenient):
    name: str


class NamedToolChoice(Lenient):
    type: Literal["function"]
    function: ToolName
