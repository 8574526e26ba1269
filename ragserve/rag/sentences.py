"""Sentences of a document's text, with their spans: where a sentence ends and where it goes
on (a line wrapped by hand, a quoted mail's line, a table's row line), and a quote of one
written as a line of prose."""

import re

from ragserve.rag.text import CAPITAL, FUNCTION_WORDS

# A sentence ends at . ! ? before a space or the end ("6.3" stays whole), or at a line break
# unless the next line goes on in lower case (a paragraph wrapped by hand, in a quote of an
# email or Markdown too: "> instead of 15:00."): headings, list items, table rows and
# "Date: ..." lines stay sentences of their own. Leader dots before a value on their line
# ("Single article limit ...... GBP 1,500") end nothing.
LEADER = re.compile(r"(?<=[ \t])\.{3,}[ \t]+(?=\S)")
SENTENCE = re.compile(
    rf"(?:[^.!?\n]|{LEADER.pattern}|[.!?](?=[^\s.!?])|\n(?=[ \t>]*[a-z]))+(?:[.!?]+|(?=\n)|$)"
)
# What a quoted line starts with ("> ", ">> "), and a line break with it.
QUOTE_MARKS = "> \t"
QUOTED_BREAK = re.compile(r"\n[ \t]*>[> \t]*")
# The opening or closing line of a fenced block of code ("```sh", "~~~").
FENCE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*$", re.M)
# Full stops that do not end a sentence: after a title, a Latin abbreviation or an initial
# (not "I", which ends "World War I.").
ABBREVIATION_END = re.compile(
    r"(?:^|[\s(])(?:Dr|Mr|Mrs|Ms|Prof|St|Mt|Jr|Sr|Gen|Col|Capt|Lt|Sgt|Rev|Hon|Gov|Sen|Rep|"
    r"vs|cf|approx|ca|e\.g|i\.e|[A-HJ-Z])\.$"
)
# A line this long that stops mid-sentence was wrapped by hand (typical widths are 70-100).
WRAPPED_LINE_CHARS = 50
# Words a sentence does not end on: a line ending in one goes on in the next.
CONTINUING_WORDS = FUNCTION_WORDS | frozenset(
    [
        "about",
        "after",
        "before",
        "between",
        "but",
        "if",
        "into",
        "must",
        "nor",
        "onto",
        "over",
        "per",
        "than",
        "these",
        "those",
        "under",
        "unless",
        "until",
        "via",
        "while",
        "whose",
        "your",
    ]
)
COLUMN_GAP = re.compile(r"\S {3,}\S|\t")
NEW_LINE_ITEM = re.compile(rf"[-*•+#|=_]|\d+[.)]\s|\d+\s\s|{CAPITAL}(?:[^\W\d_]| ){{0,30}}:\s")
LIST_MARK = re.compile(r"^(?:[-*•+]|\d{1,3}\.)\s+")
# The number of a numbered heading or list item ("6. How to claim a credit", "## 2. Remote work").
LIST_NUMBER = re.compile(r"(?:#+[ \t]*)?\d{1,3}\.")
# What parts the cells of a table's row line ("Month: July | CSAT: 4.6"; parsers/tables.py).
ROW_CELLS = " | "


def sentence_spans(text: str) -> list[tuple[str, int, int]]:
    """The text's sentences, stripped (of quote marks too), with their character spans in it.
    A full stop after a title, a Latin abbreviation or an initial ("Dr. Jennifer Melfi", "e.g.
    a key", "J. Smith") does not end a sentence unless a line ends there, and a table's row
    line is one sentence whatever its cells hold ("Value: 10 ... 30 | Unit: V DC"). The fence
    of a block of code ("```sh") is no sentence, and no sentence goes on across one (a chunk
    may start inside a block, so which fences open one is not known)."""
    spans, start = [], 0
    for fence in FENCE.finditer(text):
        spans += _prose_spans(text, start, fence.start())
        start = fence.end()
    return spans + _prose_spans(text, start, len(text))


def _prose_spans(text: str, start: int, end: int) -> list[tuple[str, int, int]]:
    """The sentences of the text between start and end, a stretch without a code fence."""
    spans: list[tuple[str, int, int]] = []
    for match in SENTENCE.finditer(text, start, end):
        piece = match.group().strip().lstrip(QUOTE_MARKS)
        if not piece:
            continue
        first = match.start() + match.group().index(piece)
        last = first + len(piece)
        if spans:
            previous, previous_start, previous_end = spans[-1]
            between = text[previous_end:first]
            joined = (
                "\n" not in between
                if ABBREVIATION_END.search(previous)
                or LIST_NUMBER.fullmatch(previous)
                or ROW_CELLS in _line_at(text, previous_start)
                else _wrapped_line(text, previous_start, previous_end, between)
            )
            if joined:
                spans[-1] = (text[previous_start:last], previous_start, last)
                continue
        spans.append((piece, first, last))
    return spans


def _line_at(text: str, position: int) -> str:
    """The whole line the position stands in."""
    end = text.find("\n", position)
    return text[text.rfind("\n", 0, position) + 1 : len(text) if end < 0 else end]


def _wrapped_line(text: str, previous_start: int, previous_end: int, between: str) -> bool:
    """Whether a sentence piece that ends a line goes on in the next line, which starts with
    a capital or a digit (the regex already joins a line going on in lower case): the text was
    wrapped by hand (a plain-text file, a PDF's lines), so the line is long, the next line
    starts no list item, numbered row, heading or table row, and the line ends in a comma, in
    a word that cannot end a sentence ("... to run pipelines from" / "Conductor 5.0.") or, when
    the sentence began before the line did (after another sentence on it, or on a line
    above), in any word ("... they cannot do" / "Friday 28 March after all"): a heading, a
    list item or a "Label: value" line starts its line. Lines of a list without marks ("Lars
    Eide — ... — 1 November 2024") end in a name or a date, and a table row or a row of a
    fixed-width table (wide gaps) ends where it ends."""
    if between.count("\n") != 1 or between.strip(QUOTE_MARKS + "\n"):
        return False
    line_start = text.rfind("\n", 0, previous_end) + 1
    raw_line = text[line_start:previous_end]
    line = raw_line.strip()
    if len(line) < WRAPPED_LINE_CHARS or "|" in line or COLUMN_GAP.search(line):
        return False
    last = line.rsplit(None, 1)[-1].lower()
    line_opens_at = line_start + len(raw_line) - len(raw_line.lstrip(QUOTE_MARKS))
    began_before = previous_start != line_opens_at
    if not (
        line.endswith(",") or last in CONTINUING_WORDS or (began_before and last[-1].isalnum())
    ):
        return False
    return not NEW_LINE_ITEM.match(text, previous_end + len(between))


def as_prose(quote: str) -> str:
    """A quoted sentence as a line of an answer: without the list mark or number it had in its
    document, and with the line breaks, indents and quote marks of a wrapped paragraph as
    single spaces (the citation keeps the exact text and its span)."""
    return LIST_MARK.sub("", " ".join(QUOTED_BREAK.sub("\n", quote).split()))
