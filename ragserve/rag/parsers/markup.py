"""Plain text and Markdown, whose parsed text is the file itself.

A span in such a document points at the exact source characters, except inside a table: a
top-level pipe table's lines are replaced by its row lines (one inside a list or quote stays as
written), so spans there point at the row text and text after it moves by the difference.
HTML comes here too, as the Markdown trafilatura extracts from a page, whose tables are pipe
lines that need no header row: the first row is the header only when a separator follows it.
"""

import itertools
import re
from collections.abc import Callable

from ragserve.rag.parsers.document import (
    TITLE_MAX_CHARS,
    Block,
    ParsedDocument,
    first_line,
    paragraph_blocks,
)
from ragserve.rag.parsers.tables import Table, aligned_tables, row_lines, with_tables

# A line of a table as trafilatura writes one in Markdown ("| a | b |"), and its head separator.
PIPE_ROW = re.compile(r"^\|.*\|$")
PIPE_SEPARATOR = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+$")
PIPE_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def parse_text(text: str, name: str) -> ParsedDocument:
    """Plain text: its paragraphs, and its tables lined up with spaces as row lines."""
    text, blocks = with_tables(text, paragraph_blocks(text), aligned_tables(text))
    return ParsedDocument(text, first_line(text) or name, blocks)


def parse_markdown(text: str, name: str) -> ParsedDocument:
    return _parse_markdown(text, name, pipe_lines=False)


def parse_extracted_markdown(text: str, name: str) -> ParsedDocument:
    """The Markdown trafilatura extracts from a page, its tables written as pipe lines."""
    return _parse_markdown(text, name, pipe_lines=True)


def _parse_markdown(text: str, name: str, pipe_lines: bool) -> ParsedDocument:
    """Markdown's blocks and tables; with pipe_lines, the tables are trafilatura's pipe lines
    (which need no header row) rather than the pipe tables Markdown itself knows."""
    from markdown_it import MarkdownIt

    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def char(line: int) -> int:
        return line_starts[line] if line < len(line_starts) else len(text)

    blocks, title = [], ""
    markdown = MarkdownIt("commonmark")
    if not pipe_lines:
        markdown.enable("table")
    tokens = markdown.parse(text)
    for i, token in enumerate(tokens):
        if (
            token.map is None
            or token.level != 0
            or token.type == "table_open"
            or (
                not token.type.endswith("_open")
                and token.type not in ("fence", "code_block", "html_block", "hr")
            )
        ):
            continue
        start, end = char(token.map[0]), char(token.map[1])
        heading = token.type == "heading_open"
        if heading and not title:
            title = tokens[i + 1].content.strip()[:TITLE_MAX_CHARS]
        blocks.append(Block(start, len(text[:end].rstrip()), heading))
    tables = _pipe_tables(text) if pipe_lines else _markdown_tables(tokens, char, text)
    text, blocks = with_tables(text, blocks, tables)
    return ParsedDocument(text, title or first_line(text) or name, blocks)


def _markdown_tables(tokens: list, char: Callable[[int], int], text: str) -> list[Table]:
    """The top-level pipe tables of parsed Markdown."""
    tables = []
    for i, token in enumerate(tokens):
        if token.type != "table_open" or token.level != 0 or token.map is None:
            continue
        header, rows, in_head = None, [], False
        for inner in itertools.takewhile(lambda t: t.type != "table_close", tokens[i + 1 :]):
            if inner.type in ("thead_open", "thead_close"):
                in_head = inner.type == "thead_open"
            elif inner.type == "tr_open":
                row: list[str] = []
                if in_head:
                    header = row
                else:
                    rows.append(row)
            elif inner.type == "inline":
                row.append(inner.content)
        # The table's last line ends before its line break (trailing spaces included).
        last = len(text[: char(token.map[1])].rstrip())
        end = last if (newline := text.find("\n", last)) < 0 else newline
        tables.append(Table(char(token.map[0]), end, row_lines(header, rows)))
    return tables


def _pipe_tables(text: str) -> list[Table]:
    """The tables trafilatura writes into its Markdown: runs of lines "| a | b |" (pipes in a
    cell escaped, a cell's line breaks made spaces), a row that holds heading cells followed by a
    separator "|---|---|". The first row is the header when it has that separator; a separator
    after a later row (a heading cell that starts the row) is dropped."""
    tables, run = [], []
    for line in re.finditer(r"[^\n]*(?:\n|$)", text):
        content = line.group().rstrip()
        if PIPE_ROW.match(content) and len(content) > 1:
            run.append((line.start(), line.start() + len(line.group().rstrip("\n")), content))
            continue
        if run:
            tables.append(_pipe_table(run))
            run = []
        if line.end() == len(text):
            break
    return tables


def _pipe_table(run: list[tuple[int, int, str]]) -> Table:
    lines = [content for _, _, content in run]
    has_header = len(lines) > 1 and PIPE_SEPARATOR.match(lines[1]) is not None
    cells = [
        [cell.replace("\\|", "|").strip() for cell in PIPE_CELL_SPLIT.split(line[1:-1])]
        for line in lines
        if not PIPE_SEPARATOR.match(line)
    ]
    header = cells.pop(0) if has_header and cells else None
    return Table(run[0][0], run[-1][1], row_lines(header, cells))
