"""Spreadsheet exports (CSV, TSV): a table, read as every format's tables are read.

Each row becomes a line that names its cells by the header row (tables.py), so a row is a
sentence of evidence: "Country: Finland | Per diem (EUR per day): 66". A .tsv file is split at
tabs. A .csv file is split at whichever of comma, semicolon, tab and bar the csv module's
sniffer finds in its first lines (spreadsheets in locales with decimal commas write
semicolons), else at commas. The first row is the header unless every cell of it is a number
(tables.sheet_lines). The title is the file's name without its suffix, as the header row is no
title.
"""

import csv
import io

from ragserve.rag.parsers.decoding import decode_text
from ragserve.rag.parsers.document import ParsedDocument, ParseError, title_from_name
from ragserve.rag.parsers.tables import line_blocks, sheet_lines

DELIMITERS = ",;\t|"
# The sniffer reads this much of the file; more only slows it down.
SNIFF_CHARS = 64 * 1024


def parse_delimited(data: bytes, name: str, delimiter: str | None = None) -> ParsedDocument:
    """A CSV or TSV file's rows as row lines; delimiter None: sniffed (module docstring)."""
    text = decode_text(data, name)
    try:
        rows = list(
            csv.reader(io.StringIO(text, newline=""), delimiter=delimiter or _sniffed(text))
        )
    except csv.Error as error:
        raise ParseError(f"{name}: not a readable table: {error}") from error
    lines = sheet_lines(rows)
    if not lines:
        raise ParseError(f"{name}: the file has no rows")
    return ParsedDocument("\n".join(lines), title_from_name(name), line_blocks(lines))


def _sniffed(text: str) -> str:
    try:
        return csv.Sniffer().sniff(text[:SNIFF_CHARS], delimiters=DELIMITERS).delimiter
    except csv.Error:  # one column, or no delimiter it can tell
        return ","
