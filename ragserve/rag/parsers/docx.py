"""Word documents (docx): paragraphs, headings, list items ("- " before each, as in
Markdown) and tables in document order, by python-docx.

A docx is a zip, re-packed under a size limit before python-docx reads it (zipped.py). A
table's first row is its header.
"""

import io
from typing import TYPE_CHECKING

from ragserve.rag.parsers.document import (
    TITLE_MAX_CHARS,
    Block,
    ParsedDocument,
    ParseError,
    first_line,
)
from ragserve.rag.parsers.tables import line_blocks, row_lines
from ragserve.rag.parsers.zipped import repacked

if TYPE_CHECKING:
    import docx.table


def _docx_rows(table: "docx.table.Table") -> list[list[str]]:
    """A docx table's cells by row and column; a cell merged across columns counts once, in its
    first column (python-docx repeats it in each)."""
    rows = []
    for row in table.rows:
        cells, previous = [], None
        for cell in row.cells:
            cells.append("" if cell._tc is previous else cell.text)
            previous = cell._tc
        rows.append(cells)
    return rows


def parse_docx(data: bytes, name: str) -> ParsedDocument:
    import docx
    import docx.table

    package = repacked(data, name, "docx")
    try:
        document = docx.Document(io.BytesIO(package))
    # A corrupt file can fail anywhere inside python-docx (zip, XML); it is this file's error.
    except Exception as error:
        raise ParseError(f"{name}: not a readable docx file ({error})") from error
    parts, blocks, title, offset = [], [], "", 0
    # The body's paragraphs and tables in document order; a table is its row lines, one a block.
    for item in document.iter_inner_content():
        if isinstance(item, docx.table.Table):
            rows = _docx_rows(item)
            if not rows:
                continue
            header, body = (rows[0], rows[1:]) if len(rows) > 1 else (None, rows)
            lines = row_lines(header, body)
            if lines:
                blocks += line_blocks(lines, offset)
                parts.append("\n".join(lines))
                offset += len(parts[-1]) + 2
            continue
        content = item.text.strip()
        if not content:
            continue
        style = (item.style.name or "") if item.style is not None else ""
        heading = style.startswith("Heading") or style == "Title"
        properties = item._p.pPr
        if style.startswith("List") or (properties is not None and properties.numPr is not None):
            # Marked as Markdown and HTML lists are, so that no item reads as a heading.
            content = f"- {content}"
        if heading and not title:
            title = content
        blocks.append(Block(offset, offset + len(content), heading))
        parts.append(content)
        offset += len(content) + 2
    text = "\n\n".join(parts)
    title = document.core_properties.title or title
    return ParsedDocument(text, title[:TITLE_MAX_CHARS] or first_line(text) or name, blocks)
