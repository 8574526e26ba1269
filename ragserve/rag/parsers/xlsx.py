"""Excel workbooks (xlsx), by openpyxl: each visible sheet a section of row lines.

A sheet reads as a CSV file does (tables.sheet_lines): one line per row that names its cells by
the header row. The sheet's name is a heading line above its rows, so a row is read with it
("Q3" over "Month: July | CSAT: 4.4"). Cells hold what the workbook last computed (a formula's
value, not the formula); a number formatted as a percentage reads as one ("31 %"), a date as
YYYY-MM-DD. Hidden sheets are left out, as a reader of the workbook would not see them.

An xlsx is a zip, re-packed under a size limit first (zipped.py); openpyxl reads its XML with
defusedxml, which refuses entity tricks such as "billion laughs".
"""

import datetime
import io
import re

from ragserve.rag.parsers.document import (
    TITLE_MAX_CHARS,
    Block,
    ParsedDocument,
    ParseError,
    title_from_name,
)
from ragserve.rag.parsers.tables import line_blocks, sheet_lines
from ragserve.rag.parsers.zipped import repacked

# A number format that shows a fixed count of decimals ("0.00", "#,##0.0").
FIXED_DECIMALS = re.compile(r"0\.(0+)")


def cell_text(value: object, number_format: str = "General") -> str:
    """What a reader sees in a cell: integers without ".0", a number formatted with a fixed
    count of decimals with that many ("24.90", "1,234.50"), percentages as "31 %", dates as
    YYYY-MM-DD (with the time when it is not midnight)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        if "%" in number_format:
            return f"{round(value * 100, 6):g} %"
        if fixed := FIXED_DECIMALS.search(number_format):
            grouping = "," if "#,##" in number_format else ""
            return f"{value:{grouping}.{len(fixed.group(1))}f}"
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)
    if isinstance(value, datetime.datetime):
        if value.time() == datetime.time():
            return value.date().isoformat()
        return value.isoformat(sep=" ", timespec="minutes")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def parse_xlsx(data: bytes, name: str) -> ParsedDocument:
    import openpyxl

    package = repacked(data, name, "xlsx")
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(package), read_only=True, data_only=True)
        sheets = [
            (sheet.title, [[cell_text(c.value, c.number_format) for c in row] for row in sheet])
            for sheet in workbook.worksheets
            if sheet.sheet_state == "visible"
        ]
        title = workbook.properties.title or ""
        workbook.close()
    # A corrupt file can fail anywhere inside openpyxl (zip, XML, styles); it is this file's
    # error.
    except Exception as error:
        raise ParseError(f"{name}: not a readable xlsx file ({error})") from error
    parts, blocks, offset = [], [], 0
    for sheet_name, rows in sheets:
        lines = sheet_lines(rows)
        if not lines:
            continue
        blocks.append(Block(offset, offset + len(sheet_name), heading=True))
        blocks += line_blocks(lines, offset + len(sheet_name) + 1)
        parts += [sheet_name, *lines]
        offset += len("\n".join([sheet_name, *lines])) + 1
    if not parts:
        raise ParseError(f"{name}: the workbook has no rows")
    return ParsedDocument(
        "\n".join(parts), title[:TITLE_MAX_CHARS] or title_from_name(name), blocks
    )
