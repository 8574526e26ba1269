"""Spreadsheet exports (CSV, TSV): a table, read as every format's tables are read.

Each row becomes a line that names its cells by the header row (tables.py), so a row is a
sentence of evidence: "Country: Finland | Per diem (EUR per day): 66". A .tsv file is split at
tabs. A .csv file is split at whichever of comma, semicolon, tab and bar the csv module's
sniffer finds in its first lines (spreadsheets in locales with decimal commas write
semicolons), else at commas. As in spreadsheet tools and pandas, the first row is the header
(years as column names included: "Region, 2023, 2024"), unless every cell of it is a number,
as in a log of readings. Blank rows are left out. The title is the file's name without its
suffix, as the header row is no title.
"""

import csv
import io
import re
from pathlib import Path

from ragserve.rag.parsers.decoding import decode_text
from ragserve.rag.parsers.document import TITLE_MAX_CHARS, Block, ParsedDocument, ParseError
from ragserve.rag.parsers.tables import row_lines

DELIMITERS = ",;\t|"
# The sniffer reads this much of the file; more only slows it down.
SNIFF_CHARS = 64 * 1024
NUMBER = re.compile(r"[-+]?[\d.,\s]*\d[\d.,\s]*%?")


def parse_delimited(data: bytes, name: str, delimiter: str | None = None) -> ParsedDocument:
    """A CSV or TSV file's rows as row lines; delimiter None: sniffed (module docstring)."""
    text = decode_text(data, name)
    try:
        rows = list(
            csv.reader(io.StringIO(text, newline=""), delimiter=delimiter or _sniffed(text))
        )
    except csv.Error as error:
        raise ParseError(f"{name}: not a readable table: {error}") from error
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        raise ParseError(f"{name}: the file has no rows")
    first = rows[0]
    has_header = not all(NUMBER.fullmatch(cell.strip()) for cell in first if cell.strip())
    lines = row_lines(first, rows[1:]) if has_header else row_lines(None, rows)
    blocks, offset = [], 0
    for line in lines:
        blocks.append(Block(offset, offset + len(line)))
        offset += len(line) + 1
    title = " ".join(re.split(r"[_\-\s]+", Path(name).stem)).strip() or name
    return ParsedDocument("\n".join(lines), title[:TITLE_MAX_CHARS], blocks)


def _sniffed(text: str) -> str:
    try:
        return csv.Sniffer().sniff(text[:SNIFF_CHARS], delimiters=DELIMITERS).delimiter
    except csv.Error:  # one column, or no delimiter it can tell
        return ","
