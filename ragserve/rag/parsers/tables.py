"""Tables as row lines, the one form every format's tables take in the parsed text.

A table becomes one line per row that names each cell by its column's header, so a sentence
holds a row whole: "Month: August | Tickets: 1,204 | CSAT: 4.6" (empty cells left out, a cell's
lines joined by spaces; a table without a header row gives "August | 1,204 | 4.6"). The header
row is not a line of its own (unless it is all the table has); each row line is a Block. Each
format finds its tables' cells and header row its own way; writing the rows and putting them
in the text in place of the table is shared, so a row reads the same whatever the file was.
"""

import re
from dataclasses import dataclass

from ragserve.rag.parsers.document import Block

NUMBER = re.compile(r"[-+]?[\d.,\s]*\d[\d.,\s]*%?")
# Inside a line of a table lined up with spaces: a gap of two or more spaces, and where a
# column starts after one.
INNER_GAP = re.compile(r"\S {2,}\S")
COLUMN_START = re.compile(r"(?<=\S) {2,}(?=\S)")
# How a row line joins its cells, and each cell's label to its value.
CELL_SEPARATOR = " | "
LABEL_SEPARATOR = ": "


@dataclass(frozen=True)
class Table:
    """A table found at [start, end) of a text, to be replaced there by its row lines."""

    start: int
    end: int
    rows: list[str]


def sheet_lines(rows: list[list[str]]) -> list[str]:
    """A spreadsheet's rows (CSV, TSV, xlsx) as row lines. As in spreadsheet tools and pandas,
    the first row is the header (years as column names included: "Region, 2023, 2024") unless
    every cell of it is a number, as in a log of readings; blank rows are left out."""
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        return []
    first = rows[0]
    if all(NUMBER.fullmatch(cell.strip()) for cell in first if cell.strip()):
        return row_lines(None, rows)
    return row_lines(first, rows[1:])


def row_lines(header: list[str] | None, rows: list[list[str]]) -> list[str]:
    """One line per row, each cell named by its column's header: "Month: August | CSAT: 4.6".
    A cell's lines are joined by spaces and empty cells left out; a table that is only a header
    keeps it as its one row."""
    if header is not None and not any(cell.strip() for row in rows for cell in row):
        header, rows = None, [header]
    labels = [" ".join(cell.split()) for cell in header or []]
    lines = []
    for row in rows:
        cells = []
        for column, cell in enumerate(row):
            cell = " ".join(cell.split())
            if cell:
                label = labels[column] if column < len(labels) else ""
                cells.append(f"{label}{LABEL_SEPARATOR}{cell}" if label else cell)
        if cells:
            lines.append(CELL_SEPARATOR.join(cells))
    return lines


def line_blocks(lines: list[str], start: int = 0) -> list[Block]:
    """A block for each line of "\n".join(lines), placed at start in the parsed text."""
    blocks = []
    for line in lines:
        blocks.append(Block(start, start + len(line)))
        start += len(line) + 1
    return blocks


def row_cells(line: str) -> list[tuple[str, str]] | None:
    """A row line's cells as (label, value) pairs, or None when the line is not a row of a
    table with a header (no cell separator, or a cell without its label)."""
    if CELL_SEPARATOR not in line:
        return None
    cells = []
    for cell in line.split(CELL_SEPARATOR):
        label, separator, value = cell.partition(LABEL_SEPARATOR)
        if not separator or not label.strip():
            return None
        cells.append((label.strip(), value.strip()))
    return cells


def with_tables(text: str, blocks: list[Block], tables: list[Table]) -> tuple[str, list[Block]]:
    """The text with each table replaced by its row lines, and the blocks moved to match: cut
    around the tables (a paragraph running into one keeps its part outside it), with a block
    for each row line."""
    tables = sorted((t for t in tables if t.rows), key=lambda t: t.start)
    if not tables:
        return text, blocks
    pieces, row_blocks, shifts, position, length = [], [], [], 0, 0
    for table in tables:
        pieces.append(text[position : table.start])
        length += table.start - position
        for number, row in enumerate(table.rows):
            if number:
                pieces.append("\n")
                length += 1
            row_blocks.append(Block(length, length + len(row)))
            pieces.append(row)
            length += len(row)
        shifts.append((table.end, length - table.end))
        position = table.end
    pieces.append(text[position:])

    def moved(offset: int) -> int:
        return offset + next((s for end, s in reversed(shifts) if end <= offset), 0)

    moved_blocks = []
    for block in blocks:
        cuts = [block.start]
        for table in tables:
            if table.start < block.end and block.start < table.end:
                cuts += [table.start, table.end]
        cuts.append(block.end)
        for start, end in zip(cuts[::2], cuts[1::2], strict=True):
            piece = text[start:end]
            if piece.strip():
                start += len(piece) - len(piece.lstrip())
                end -= len(piece) - len(piece.rstrip())
                moved_blocks.append(Block(moved(start), moved(end), block.heading))
    return "".join(pieces), sorted(moved_blocks + row_blocks, key=lambda b: b.start)


def aligned_tables(text: str) -> list[Table]:
    """The tables of plain text whose columns are lined up with spaces: a header line and at
    least two rows, every line with a gap of two or more spaces inside it, each header column
    starting where the rows have a space just before (a cell may be empty, a last column
    short) and each row's own gaps ending at some of them. A "Date:   15 October" block of
    labels is not a table, nor is prose with two spaces after its full stops: header cells end
    in no colon and no punctuation of a sentence."""
    tables, run = [], []
    for line in re.finditer(r"^.*$", text, re.MULTILINE):
        content = line.group()
        if content.strip() and INNER_GAP.search(content.strip()):
            run.append(line)
            continue
        tables += _aligned(run)
        run = []
    return tables + _aligned(run)


def _aligned(lines: list[re.Match[str]]) -> list[Table]:
    if len(lines) < 3:
        return []
    header = lines[0].group()
    starts = [m.end() for m in COLUMN_START.finditer(header)]
    starts = [len(header) - len(header.lstrip()), *starts]
    labels = _cells(header, starts)
    if len(labels) < 2 or any(not label or label[-1] in ":.,;!?" for label in labels):
        return []
    if all(NUMBER.fullmatch(label) for label in labels):
        return []
    rows = []
    for line in lines[1:]:
        row = line.group()
        if any(len(row) > start > 0 and row[start - 1] != " " for start in starts[1:]):
            return []
        # A row's own gaps line up with the header's columns: prose with two spaces after
        # its full stops only happens to have spaces there.
        if not {m.end() for m in COLUMN_START.finditer(row)} & set(starts[1:]):
            return []
        rows.append(_cells(row, starts))
    return [Table(lines[0].start(), lines[-1].end(), row_lines(labels, rows))]


def _cells(line: str, starts: list[int]) -> list[str]:
    ends = [*starts[1:], len(line)]
    return [line[start:end].strip() for start, end in zip(starts, ends, strict=True)]
