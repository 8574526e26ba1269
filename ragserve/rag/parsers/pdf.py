"""PDF: the text pypdf extracts, page by page, with ruled tables found by pdfplumber.

pypdf is fast and its text is what the document holds; pdfplumber, a few ten times slower,
is asked only about pages that draw lines, for tables ruled into cells. A table's first row is
its header. Tables drawn without lines keep pypdf's text, one line a row, cells split by spaces.
"""

import io
import re
from collections import Counter
from typing import TYPE_CHECKING

from ragserve.rag.parsers.document import (
    TITLE_MAX_CHARS,
    ParsedDocument,
    ParseError,
    first_line,
    paragraph_blocks,
)
from ragserve.rag.parsers.tables import Table, row_lines, with_tables

if TYPE_CHECKING:
    import pypdf

# The PDF path operators for a rectangle (re) and a line segment (l).
DRAWS_LINES = re.compile(rb"(?<![^\s\d.])(?:re|l)(?![^\s\[/(<])")


def _draws_lines(page: "pypdf.PageObject") -> bool:
    """Whether the page's content draws a rectangle or a line segment (a ruled table's cells):
    pdfplumber reads a page a few ten times slower than pypdf, so only such pages are read."""
    try:
        contents = page.get_contents()
        return contents is not None and DRAWS_LINES.search(contents.get_data()) is not None
    # A page whose content cannot be read again keeps pypdf's text, whatever the reason.
    except Exception:
        return False


def _pdf_tables(data: bytes, pages: list[str], ruled: list[bool]) -> list[list[Table]]:
    """Each page's ruled tables (pdfplumber finds them by their lines), placed on the lines of
    pypdf's text of the page that hold exactly the table's characters; a table whose lines
    cannot be told apart there (text beside it) is left as pypdf wrote it. A file pdfplumber
    cannot read keeps pypdf's text: tables are a refinement, the text is already there."""
    found: list[list[Table]] = [[] for _ in pages]
    if not any(ruled):
        return found
    try:
        import pdfplumber

        with pdfplumber.open(io.BytesIO(data)) as pdf:
            for number, page in enumerate(pdf.pages[: len(pages)]):
                if not ruled[number] or (not page.rects and not page.lines):
                    continue
                extracted = [table.extract() for table in page.find_tables()]
                found[number] = _placed_tables(pages[number], extracted)
    # pdfplumber (pdfminer underneath) can fail anywhere on a damaged file.
    except Exception:
        return [[] for _ in pages]
    return found


def _placed_tables(page: str, extracted: list[list[list[str | None]]]) -> list[Table]:
    lines = list(re.finditer(r"[^\n]+", page))
    tables, first = [], 0
    for table in extracted:
        cells = [[cell or "" for cell in row] for row in table]
        wanted = Counter("".join("".join(row) for row in cells).replace(" ", "").replace("\n", ""))
        if not wanted or (span := _lines_holding(lines, first, wanted)) is None:
            continue
        header, rows = (cells[0], cells[1:]) if len(cells) > 1 else (None, cells)
        tables.append(Table(lines[span[0]].start(), lines[span[1]].end(), row_lines(header, rows)))
        first = span[1] + 1
    return tables


def _lines_holding(
    lines: list[re.Match[str]], first: int, wanted: Counter[str]
) -> tuple[int, int] | None:
    """The first run of lines from `first` on whose characters, spaces aside, are `wanted`."""
    for i in range(first, len(lines)):
        have: Counter[str] = Counter()
        for j in range(i, len(lines)):
            have.update(lines[j].group().replace(" ", ""))
            if have == wanted:
                return i, j
            if have.total() >= wanted.total():
                break
    return None


def parse_pdf(data: bytes, name: str) -> ParsedDocument:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
        title = (reader.metadata.title if reader.metadata else None) or ""
        ruled = [_draws_lines(page) for page in reader.pages]
    # A corrupt file can fail anywhere inside pypdf; any failure is this file's error.
    except Exception as error:
        raise ParseError(f"{name}: not a readable PDF ({error})") from error
    tables, kept, offset = [], [], 0
    for page, page_tables in zip(pages, _pdf_tables(data, pages, ruled), strict=True):
        if not page.strip():
            continue
        # Table lines hold text, so they lie within the stripped page; move them with it.
        shift = offset - (len(page) - len(page.lstrip()))
        tables += [Table(t.start + shift, t.end + shift, t.rows) for t in page_tables]
        kept.append(page.strip())
        offset += len(kept[-1]) + 2
    text = "\n\n".join(kept)
    text, blocks = with_tables(text, paragraph_blocks(text), tables)
    return ParsedDocument(text, title.strip()[:TITLE_MAX_CHARS] or first_line(text) or name, blocks)
