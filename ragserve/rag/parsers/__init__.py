"""Turn files into text with structure: txt, Markdown, HTML, PDF, docx, CSV, TSV and xlsx.

The parsed text is what chunks, spans and citations refer to. For txt and Markdown it is the
file itself but for its tables, so a span points at the exact source characters; for HTML
(main content found by trafilatura, boilerplate dropped), PDF (pypdf), docx (python-docx), CSV
or TSV (delimited) and xlsx (openpyxl) it is the extracted text, a spreadsheet's rows written
as lines. Blocks mark paragraphs and headings, for chunking that does not straddle a heading.
Tables become one line per row that names each cell by its column's header (see tables).

Files are untrusted: whatever a file holds, parsing it either returns text or raises ParseError
naming the file and the reason. Each format is a module of its own, so that reading one does
not mean reading them all; this one picks the format by a file's name and checks what every
format's text must be. Parsing libraries are imported when a file needs them, not on import.
"""

import re
from pathlib import Path

from ragserve.rag.parsers.decoding import decode_text
from ragserve.rag.parsers.delimited import parse_delimited
from ragserve.rag.parsers.document import (
    TITLE_MAX_CHARS,
    Block,
    ParsedDocument,
    ParseError,
    unstorable,
)
from ragserve.rag.parsers.docx import parse_docx
from ragserve.rag.parsers.html import parse_html
from ragserve.rag.parsers.markup import parse_markdown, parse_text
from ragserve.rag.parsers.pdf import parse_pdf
from ragserve.rag.parsers.xlsx import parse_xlsx

__all__ = [
    "SUPPORTED_SUFFIXES",
    "TITLE_MAX_CHARS",
    "Block",
    "ParseError",
    "ParsedDocument",
    "decode_text",
    "parse_bytes",
    "parse_delimited",
    "parse_docx",
    "parse_html",
    "parse_markdown",
    "parse_pdf",
    "parse_text",
    "parse_xlsx",
    "unstorable",
]

SUPPORTED_SUFFIXES = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".csv": "csv",
    ".tsv": "tsv",
    ".xlsx": "xlsx",
}


def parse_bytes(data: bytes, name: str, kind: str | None = None) -> ParsedDocument:
    """Parse file content; kind is one of text, markdown, html, pdf, docx, csv, tsv, xlsx
    (default: by name)."""
    kind = kind or SUPPORTED_SUFFIXES.get(Path(name).suffix.lower())
    if kind is None:
        raise ParseError(
            f"{name}: unsupported file type; supported: {', '.join(sorted(SUPPORTED_SUFFIXES))}"
        )
    if not data.strip():
        raise ParseError(f"{name}: the file is empty")
    if kind in ("text", "markdown"):
        text = decode_text(data, name)
        parsed = parse_text(text, name) if kind == "text" else parse_markdown(text, name)
    elif kind == "html":
        parsed = parse_html(data, name)
    elif kind == "pdf":
        parsed = parse_pdf(data, name)
    elif kind == "docx":
        parsed = parse_docx(data, name)
    elif kind in ("csv", "tsv"):
        parsed = parse_delimited(data, name, "\t" if kind == "tsv" else None)
    elif kind == "xlsx":
        parsed = parse_xlsx(data, name)
    else:
        raise ParseError(f"{name}: unknown document kind {kind!r}")
    # Nothing to search for without a letter or a digit (a page cut off inside its first tag
    # leaves only markup debris).
    if not re.search(r"\w", parsed.text):
        raise ParseError(f"{name}: no text could be extracted")
    for what, value in (("text", parsed.text), ("title", parsed.title)):
        if problem := unstorable(value):
            raise ParseError(f"{name}: the extracted {what} has {problem}")
    return parsed
