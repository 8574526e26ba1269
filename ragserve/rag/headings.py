"""Headings: which lines name what follows rather than state something, and which heading a
place in a document stands under. Evidence reads a sentence with its heading (a heading is
never an answer), and retrieval gives a chunk the heading it starts under."""

import re

from ragserve.rag.sentences import LEADER, QUOTE_MARKS, sentence_spans

# A line of at most this many words without a full stop, a colon or a table bar is a heading.
HEADING_MAX_WORDS = 12
LIST_MARKS = "-*•+ \t"
# A bulleted line ("- 50 g fresh yeast", "• Laptop and charger") is a list's item.
LIST_ITEM = re.compile(r"^\s*[-*•+]\s")
# The subject line of a mail's header names what its message is about.
MAIL_SUBJECT = re.compile(r"^Subject:[ \t]", re.IGNORECASE)
# The number a numbered line starts with ("3. Remove the battery", "2) Unplug it").
LINE_NUMBER = re.compile(r"^[ \t]*(\d{1,3})[.)][ \t]")


def heads_section(text: str, start: int, end: int, title: str) -> bool:
    """Whether the sentence at [start, end) of the text is a heading: a whole line that
    is_heading, and not a step of a numbered list, whose line the next or the previous line
    goes on counting ("1. Unscrew the cover" / "2. Lift the battery out"), where numbered
    headings have their section's text between them."""
    sentence = text[start:end]
    return (
        is_whole_line(text, start, end)
        and is_heading(sentence, title)
        and not _numbered_step(text, start)
    )


def _numbered_step(text: str, start: int) -> bool:
    line_start = text.rfind("\n", 0, start) + 1
    line_end = _line_end(text, line_start)
    number = _line_number(text[line_start:line_end])
    if number is None:
        return False
    previous_start = text.rfind("\n", 0, max(0, line_start - 1)) + 1
    previous = text[previous_start : max(previous_start, line_start - 1)]
    following = text[line_end + 1 : _line_end(text, line_end + 1)]
    return _line_number(previous) == number - 1 or _line_number(following) == number + 1


def _line_end(text: str, position: int) -> int:
    end = text.find("\n", position)
    return len(text) if end < 0 else end


def _line_number(line: str) -> int | None:
    found = LINE_NUMBER.match(line)
    return int(found.group(1)) if found else None


def is_whole_line(text: str, start: int, end: int) -> bool:
    """Whether [start, end) is its line's text, a quoted line's (after its "> " marks) too."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = _line_end(text, end)
    return not text[line_start:start].strip(QUOTE_MARKS) and not text[end:line_end].strip()


def is_heading(line: str, title: str) -> bool:
    """A line that names what follows rather than stating something: a Markdown heading, a
    question, a mail's "Subject:" line, the document's title (unless it ends a sentence), or a
    short line without a full stop, colon, table bar or leader dots that is no list item (an
    ingredient, a checklist's step: items state what the list holds, and seldom end with a full
    stop; a line with leader dots pairs a label with its value)."""
    plain = line.strip().lstrip(LIST_MARKS).strip()
    if plain.startswith("#") or plain.endswith("?") or MAIL_SUBJECT.match(plain):
        return True
    if LIST_ITEM.match(line):
        return False
    # A one-line note's first line is its title and its content: a full stop keeps it.
    if plain[-1:] in ".!":
        return False
    if plain.lower() == title.strip().lower():
        return True
    if ":" in plain or "|" in plain or LEADER.search(plain):
        return False
    return len(plain.split()) <= HEADING_MAX_WORDS


def heading_above(text: str, start: int, title: str) -> str:
    """The heading (or FAQ question) that the text at start stands under: the last whole-line
    heading before start's line, read as a chunk's sentences are; "" if none. The text is read
    to the end of start's line, so that a line wrapped into it is not taken for a heading."""
    line_start = text.rfind("\n", 0, start) + 1
    region = text[: _line_end(text, start)]
    for sentence, first, last in reversed(sentence_spans(region)):
        if last <= line_start and heads_section(region, first, last, title):
            return sentence.lstrip("#").strip()
    return ""
