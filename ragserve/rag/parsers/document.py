"""What parsing a file gives: its text, a title and the blocks of that text, or ParseError.

Every format's parser builds the same ParsedDocument, so chunking and storage need not know
where the text came from; the checks here (a title's length, what text can be stored) are the
ones every format shares.
"""

import re
from dataclasses import dataclass, field

TITLE_MAX_CHARS = 200
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class ParseError(ValueError):
    """A file that cannot be turned into text; the message says which file and why."""


@dataclass(frozen=True)
class Block:
    start: int
    end: int
    heading: bool = False


@dataclass
class ParsedDocument:
    text: str
    title: str
    blocks: list[Block] = field(default_factory=list)


def unstorable(text: str) -> str | None:
    """What in text cannot be stored and searched, or None: a NUL (binary data; PostgreSQL's
    text type refuses it) or an unpaired surrogate (not Unicode: nothing can encode it, yet
    JSON's "\\ud800" and some PDF font maps produce one)."""
    if "\x00" in text:
        return f"a NUL character at offset {text.index(chr(0))}"
    if found := LONE_SURROGATE.search(text):
        return f"an unpaired surrogate U+{ord(found.group()):04X} at offset {found.start()}"
    return None


def paragraph_blocks(text: str, offset: int = 0) -> list[Block]:
    blocks = []
    for match in re.finditer(r"\S(?:.|\n(?!\s*\n))*", text):
        blocks.append(Block(offset + match.start(), offset + match.end()))
    return blocks


def title_from_name(name: str) -> str:
    """A file's name as a title, for formats whose first line is no title (a spreadsheet's
    header row): its stem, with dashes and underscores as spaces ("per-diem_rates.csv": "per
    diem rates")."""
    stem = name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return (" ".join(re.split(r"[_\-\s]+", stem)).strip() or name)[:TITLE_MAX_CHARS]


def first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line.strip().lstrip("#").strip()[:TITLE_MAX_CHARS]
