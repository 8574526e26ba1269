"""Tool calls on chat completions. The offered functions are described to the model in a system
message; a forced call (tool_choice "required" or a named function) is held to a JSON schema by
the engine's structured output, so its arguments always validate; with "auto" the model may
answer in text or with a call, which is read from its reply.

What the model writes for a call: the arguments object alone when the function is named (so a
stream can pass the arguments on as they come), otherwise {"name": ..., "arguments": {...}}.
"""

import json
import uuid
from dataclasses import dataclass
from typing import Any

from ragserve.engine.structured import OutputConstraint
from ragserve.server.constraints import NamedToolChoice, Tool

ANY_OBJECT: dict[str, Any] = {"type": "object"}
TOOL_PROMPT = (
    "You can call these functions (JSON schemas of their arguments):\n{functions}\n"
    'To call one, reply with only a JSON object: {{"name": "<function name>", '
    '"arguments": {{<the arguments>}}}}. Otherwise answer normally.'
)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def new_call(name: str, arguments: str) -> ToolCall:
    return ToolCall(f"call_{uuid.uuid4().hex[:24]}", name, arguments)


class ToolUse:
    """How one chat request uses its tools: "auto" (may call), "required" (must call one), or
    one named function (must call it)."""

    def __init__(self, tools: list[Tool], choice: str | NamedToolChoice | None) -> None:
        self.parameters = {t.function.name: t.function.parameters or ANY_OBJECT for t in tools}
        self.descriptions = {t.function.name: t.function.description or "" for t in tools}
        self.mode = "named" if isinstance(choice, NamedToolChoice) else choice or "auto"
        self.named = choice.function.name if isinstance(choice, NamedToolChoice) else None
        if self.mode == "required" and len(tools) == 1:
            self.mode, self.named = "named", tools[0].function.name

    @classmethod
    def of(cls, tools: list[Tool] | None, choice: str | NamedToolChoice | None) -> "ToolUse | None":
        """None when there are no tools or tool_choice is "none": a plain chat."""
        if not tools or choice == "none":
            return None
        return cls(tools, choice)

    def messages(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        """The conversation with the functions described in its system message."""
        functions = json.dumps(
            [
                {"name": n, "description": self.descriptions[n], "parameters": p}
                for n, p in self.parameters.items()
            ]
        )
        described = TOOL_PROMPT.format(functions=functions)
        if messages and messages[0]["role"] in ("system", "developer"):
            first, rest = messages[0], messages[1:]
            return [{"role": "system", "content": first["content"] + "\n\n" + described}, *rest]
        return [{"role": "system", "content": described}, *messages]

    def constraint(self) -> OutputConstraint | None:
        """What a forced call's output must match (none with "auto")."""
        if self.named is not None:
            return OutputConstraint("json", json.dumps(self.parameters[self.named]))
        if self.mode != "required":
            return None
        calls = [
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for name, parameters in self.parameters.items()
        ]
        return OutputConstraint("json", json.dumps({"anyOf": calls}))

    def calls(self, text: str) -> list[ToolCall]:
        """The calls in a finished reply; none when it is an answer in text."""
        if self.named is not None:
            return [new_call(self.named, text)]
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return []
        called = value if isinstance(value, list) else [value]
        found = []
        for call in called:
            if not isinstance(call, dict) or call.get("name") not in self.parameters:
                return []
            arguments = call.get("arguments", call.get("parameters", {}))
            if not isinstance(arguments, dict):
                return []
            found.append(new_call(call["name"], json.dumps(arguments)))
        return found

    def may_be_call(self, text: str) -> bool:
        """Whether a reply that begins so could still become a call (a stream holds it back)."""
        stripped = text.lstrip()
        return not stripped or stripped[0] in "{["


class CallStream:
    """One choice of a streamed chat with tools: what each new piece of text becomes on the
    wire, as (delta, finish reason) pairs. A named call streams its arguments as they come;
    otherwise a reply that may still become a call is held back until it is one or is not."""

    def __init__(self, tools: ToolUse) -> None:
        self.tools = tools
        self.text = ""
        self.as_text = False
        self.opened = False

    def feed(self, piece: str, reason: str | None) -> list[tuple[dict[str, Any], str | None]]:
        self.text += piece
        if self.tools.named is not None:
            return self._named(piece, reason)
        if not self.as_text and not self.tools.may_be_call(self.text):
            self.as_text, piece = True, self.text  # what was held goes out now
        if self.as_text:
            return [({"content": piece} if piece else {}, reason)] if piece or reason else []
        if reason is None:
            return []
        calls = self.tools.calls(self.text) if reason == "stop" else []
        if not calls:
            return [({"content": self.text}, reason)]
        wire = [{"index": i, **call.wire()} for i, call in enumerate(calls)]
        return [({"tool_calls": wire}, "tool_calls")]

    def _named(self, piece: str, reason: str | None) -> list[tuple[dict[str, Any], str | None]]:
        deltas: list[tuple[dict[str, Any], str | None]] = []
        if not self.opened:
            self.opened = True
            opener = {"index": 0, **new_call(str(self.tools.named), "").wire()}
            deltas.append(({"tool_calls": [opener]}, None))
        if piece:
            deltas.append(({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, None))
        if reason is not None:
            deltas.append(({}, "tool_calls" if reason == "stop" else reason))
        return deltas
