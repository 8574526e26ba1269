"""Word documents (docx): paragraphs, headings and tables in document order, by python-docx.

A docx is a zip, and a small one can unpack to gigabytes: its parts are re-packed under a size
limit before python-docx reads them. A table's first row is its header.
"""

import io
import zipfile
from typing import TYPE_CHECKING

from ragserve.rag.parsers.document import (
    TITLE_MAX_CHARS,
    Block,
    ParsedDocument,
    ParseError,
    first_line,
)
from ragserve.rag.parsers.tables import row_lines

if TYPE_CHECKING:
    import docx.table

# A docx is a zip whose parts python-docx inflates whole into memory: a few hundred kB can
# declare gigabytes. A long text document is a few tens of MB of XML, and images are stored
# about as large as they are packed, so more than this is refused before anything is inflated.
DOCX_MAX_UNPACKED_BYTES = 64 << 20


def _repacked(data: bytes, name: str) -> bytes:
    """The docx's parts, inflated piece by piece and re-packed uncompressed for python-docx.

    python-docx reads each part whole, and zipfile, asked for a whole part, inflates all of its
    compressed bytes before cutting them to the size the directory declares, which a bomb can
    understate. Read in pieces, zipfile yields no more than a part declares: so a bomb that
    declares its size is refused before anything is inflated, and one that understates it is
    cut short (and fails its CRC check, or its XML)."""
    out = io.BytesIO()
    try:
        with (
            zipfile.ZipFile(io.BytesIO(data)) as archive,
            zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as repacked,
        ):
            parts = [info for info in archive.infolist() if not info.is_dir()]
            declared = sum(info.file_size for info in parts)
            if declared > DOCX_MAX_UNPACKED_BYTES:
                raise ParseError(
                    f"{name}: refused: its parts unpack to {declared} bytes, more than the "
                    f"{DOCX_MAX_UNPACKED_BYTES} a docx may (a zip bomb?)"
                )
            for info in parts:
                with archive.open(info) as part, repacked.open(info.filename, "w") as stored:
                    while piece := part.read(1 << 20):
                        stored.write(piece)
    except ParseError:
        raise
    # zipfile reports a damaged archive through several exception types (BadZipFile, ValueError,
    # EOFError, an unsupported-feature error for a bogus version); each is this file's error.
    except Exception as error:
        raise ParseError(f"{name}: not a readable docx file ({error})") from error
    return out.getvalue()


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

    package = _repacked(data, name)
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
            for line in lines:
                blocks.append(Block(offset, offset + len(line)))
                offset += len(line) + 1
            if lines:
                parts.append("\n".join(lines))
                offset += 1
            continue
        content = item.text.strip()
        if not content:
            continue
        style = (item.style.name or "") if item.style is not None else ""
        heading = style.startswith("Heading") or style == "Title"
        if heading and not title:
            title = content
        blocks.append(Block(offset, offset + len(content), heading))
        parts.append(content)
        offset += len(content) + 2
    text = "\n\n".join(parts)
    title = document.core_properties.title or title
    return ParsedDocument(text, title[:TITLE_MAX_CHARS] or first_line(text) or name, blocks)
