"""Turn files into text with structure: txt, Markdown, HTML, PDF and docx.

The parsed text is what chunks, spans and citations refer to. For txt and Markdown it is the
file itself, so a span points at the exact source characters; for HTML (main content found by
trafilatura, boilerplate dropped), PDF (pypdf) and docx (python-docx) it is the extracted text.
Blocks mark paragraphs and headings, for chunking that does not straddle a heading.
"""

import io
import re
from dataclasses import dataclass, field
from pathlib import Path

SUPPORTED_SUFFIXES = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
TITLE_MAX_CHARS = 200


class ParseError(ValueError):
    """A file that cannot be turned into text; the message says which file and why."""


@dataclass(frozen=True)
class Block:
    start: int
    end: int
    heading: bool = False


@dataclass
class ParsedDocument:
    text: str
    title: str
    blocks: list[Block] = field(default_factory=list)


def _paragraph_blocks(text: str, offset: int = 0) -> list[Block]:
    blocks = []
    for match in re.finditer(r"\S(?:.|\n(?!\s*\n))*", text):
        blocks.append(Block(offset + match.start(), offset + match.end()))
    return blocks


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line.strip().lstrip("#").strip()[:TITLE_MAX_CHARS]


def parse_text(text: str, name: str) -> ParsedDocument:
    return ParsedDocument(text, _first_line(text) or name, _paragraph_blocks(text))


def parse_markdown(text: str, name: str) -> ParsedDocument:
    from markdown_it import MarkdownIt

    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def char(line: int) -> int:
        return line_starts[line] if line < len(line_starts) else len(text)

    blocks, title = [], ""
    tokens = MarkdownIt("commonmark").parse(text)
    for i, token in enumerate(tokens):
        if (
            token.map is None
            or token.level != 0
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
    return ParsedDocument(text, title or _first_line(text) or name, blocks)


def parse_html(data: bytes, name: str) -> ParsedDocument:
    import trafilatura

    html = data.decode("utf-8", errors="replace")
    text = trafilatura.extract(
        html,
        output_format="markdown",
        include_comments=False,
        include_tables=True,
        favor_recall=True,
    )
    if not text or not text.strip():
        raise ParseError(f"{name}: no main text found in the HTML")
    metadata = trafilatura.extract_metadata(html)
    parsed = parse_markdown(text, name)
    if metadata is not None and metadata.title:
        parsed.title = metadata.title[:TITLE_MAX_CHARS]
    return parsed


def parse_pdf(data: bytes, name: str) -> ParsedDocument:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
        title = (reader.metadata.title if reader.metadata else None) or ""
    # A corrupt file can fail anywhere inside pypdf; any failure is this file's error.
    except Exception as error:
        raise ParseError(f"{name}: not a readable PDF ({error})") from error
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    return ParsedDocument(
        text, title.strip()[:TITLE_MAX_CHARS] or _first_line(text) or name, _paragraph_blocks(text)
    )


def parse_docx(data: bytes, name: str) -> ParsedDocument:
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
    # A corrupt file can fail anywhere inside python-docx (zip, XML); it is this file's error.
    except Exception as error:
        raise ParseError(f"{name}: not a readable docx file ({error})") from error
    parts, blocks, title, offset = [], [], "", 0
    for paragraph in document.paragraphs:
        content = paragraph.text.strip()
        if not content:
            continue
        style = (paragraph.style.name or "") if paragraph.style is not None else ""
        heading = style.startswith("Heading") or style == "Title"
        if heading and not title:
            title = content
        blocks.append(Block(offset, offset + len(content), heading))
        parts.append(content)
        offset += len(content) + 2
    text = "\n\n".join(parts)
    title = document.core_properties.title or title
    return ParsedDocument(text, title[:TITLE_MAX_CHARS] or _first_line(text) or name, blocks)


def parse_bytes(data: bytes, name: str, kind: str | None = None) -> ParsedDocument:
    """Parse file content; kind is one of text, markdown, html, pdf, docx (default: by name)."""
    kind = kind or SUPPORTED_SUFFIXES.get(Path(name).suffix.lower())
    if kind is None:
        raise ParseError(
            f"{name}: unsupported file type; supported: {', '.join(sorted(SUPPORTED_SUFFIXES))}"
        )
    if not data.strip():
        raise ParseError(f"{name}: the file is empty")
    if kind in ("text", "markdown"):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ParseError(f"{name}: not UTF-8 text (binary file?)") from error
        if "\x00" in text:
            raise ParseError(f"{name}: not UTF-8 text (binary file?)")
        parsed = parse_text(text, name) if kind == "text" else parse_markdown(text, name)
    elif kind == "html":
        parsed = parse_html(data, name)
    elif kind == "pdf":
        parsed = parse_pdf(data, name)
    elif kind == "docx":
        parsed = parse_docx(data, name)
    else:
        raise ParseError(f"{name}: unknown document kind {kind!r}")
    if not parsed.text.strip():
        raise ParseError(f"{name}: no text could be extracted")
    return parsed
