"""The base of the OpenAI-compatible request bodies: like vLLM, they keep fields they do not
know (unknown_fields() names them), and refuse with a reason what they cannot honour."""

from pydantic import BaseModel, ConfigDict


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


def unknown_fields(body: BaseModel, prefix: str = "") -> list[str]:
    """Dotted names of the fields the body carried but does not define, nested ones included
    (a field of list items is named once: messages.name). A name can be any JSON string, and
    the names go into a response header (latin-1, one line): each is escaped to printable ASCII
    as ascii() escapes it."""
    found = [prefix + ascii(name)[1:-1] for name in body.model_extra or {}]
    for name in type(body).model_fields:
        value = getattr(body, name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, BaseModel):
                found.extend(unknown_fields(item, f"{prefix}{name}."))
    return list(dict.fromkeys(found))


def refuse_if(condition: bool, message: str) -> None:
    if condition:
        raise ValueError(message)
