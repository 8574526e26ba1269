"""Turn files into text with structure: txt, Markdown, HTML, PDF and docx.

The parsed text is what chunks, spans and citations refer to. For txt and Markdown it is the
file itself, so a span points at the exact source characters; for HTML (main content found by
trafilatura, boilerplate dropped), PDF (pypdf) and docx (python-docx) it is the extracted text.
Blocks mark paragraphs and headings, for chunking that does not straddle a heading.

Tables become one line per row that names each cell by its column's header, so a sentence holds
a row whole: "Month: August | Tickets: 1,204 | CSAT: 4.6" (empty cells left out, a cell's lines
joined by spaces; a table without a header row gives "August | 1,204 | 4.6"). The header row is
not a line of its own (unless it is all the table has); each row line is a Block. A Markdown
table's lines are replaced by its row lines, so spans inside a table point at the row text and
text after it moves by the difference; everything outside tables is still the file's characters.
Where the header comes from: Markdown, the pipe table's header row (top-level tables only: one
inside a list or quote stays as written); HTML, the cells trafilatura marks as headings (<th>)
in the first row, else none; docx, the first row; PDF, the first row of a ruled table found by
pdfplumber (tables drawn without lines keep pypdf's text, one line a row, cells split by spaces).

Files are untrusted: whatever a file holds, parsing it either returns text or raises ParseError
naming the file and the reason. Text is decoded strictly (a byte-order mark, an HTML page's
declared charset, else UTF-8); a guessed encoding would store garbled text that citations then
quote.
"""

import codecs
import io
import itertools
import re
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docx.table
    import pypdf

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
# A docx is a zip whose parts python-docx inflates whole into memory: a few hundred kB can
# declare gigabytes. A long text document is a few tens of MB of XML, and images are stored
# about as large as they are packed, so more than this is refused before anything is inflated.
DOCX_MAX_UNPACKED_BYTES = 64 << 20
# Byte-order marks name an encoding unambiguously; UTF-32 LE's starts with UTF-16 LE's, so it
# is tried first. The codecs named here consume the mark.
BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# An HTML page declares its charset in a <meta> within its first 1024 bytes (the HTML standard's
# prescan).
META_CHARSET = re.compile(rb"<meta[^>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.IGNORECASE)
# Browsers read these labels as windows-1252 (the WHATWG Encoding Standard), and so do pages.
WINDOWS_1252_ALIASES = {"iso8859-1", "ascii"}
# A <meta> that could be read byte by byte cannot be in UTF-16 or UTF-32, whatever it says:
# browsers read such a page as UTF-8.
WIDE_UNICODE_CODECS = ("utf-16", "utf-32")
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


# A line of a table as trafilatura writes one in Markdown ("| a | b |"), and its head separator.
PIPE_ROW = re.compile(r"^\|.*\|$")
PIPE_SEPARATOR = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+$")
PIPE_CELL_SPLIT = re.compile(r"(?<!\\)\|")
# The PDF path operators for a rectangle (re) and a line segment (l).
DRAWS_LINES = re.compile(rb"(?<![^\s\d.])(?:re|l)(?![^\s\[/(<])")


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


def unstorable(text: str) -> str | None:
    """What in text cannot be stored and searched, or None: a NUL (binary data; PostgreSQL's
    text type refuses it) or an unpaired surrogate (not Unicode: nothing can encode it, yet
    JSON's "\\ud800" and some PDF font maps produce one)."""
    if "\x00" in text:
        return f"a NUL character at offset {text.index(chr(0))}"
    if found := LONE_SURROGATE.search(text):
        return f"an unpaired surrogate U+{ord(found.group()):04X} at offset {found.start()}"
    return None


def decode_text(data: bytes, name: str, declared: str | None = None) -> str:
    """The text of a file: by its byte-order mark, else by the declared encoding, else UTF-8.
    Bytes invalid in that encoding (another encoding, or a binary file) are the file's error."""
    encoding = next((enc for mark, enc in BYTE_ORDER_MARKS if data.startswith(mark)), None)
    encoding = encoding or declared or "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        label = encoding.upper().removesuffix("-SIG")
        raise ParseError(
            f"{name}: not {label} text: byte 0x{data[error.start]:02x} at offset {error.start} "
            "cannot be decoded (a binary file, or another encoding: save it as UTF-8)"
        ) from error
    if problem := unstorable(text):
        raise ParseError(f"{name}: not a text file: it has {problem}")
    return text


def _declared_charset(html: bytes) -> str | None:
    """The codec a page's <meta> declares, if Python knows it (browsers ignore unknown labels)."""
    found = META_CHARSET.search(html[:1024])
    if found is None:
        return None
    try:
        codec = codecs.lookup(found.group(1).decode("ascii")).name
    except LookupError:
        return None
    if codec.startswith(WIDE_UNICODE_CODECS):
        return "utf-8"
    return "cp1252" if codec in WINDOWS_1252_ALIASES else codec


def _paragraph_blocks(text: str, offset: int = 0) -> list[Block]:
    blocks = []
    for match in re.finditer(r"\S(?:.|\n(?!\s*\n))*", text):
        blocks.append(Block(offset + match.start(), offset + match.end()))
    return blocks


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line.strip().lstrip("#").strip()[:TITLE_MAX_CHARS]


@dataclass(frozen=True)
class _Table:
    """A table found at [start, end) of a text, to be replaced there by its row lines."""

    start: int
    end: int
    rows: list[str]


def _row_lines(header: list[str] | None, rows: list[list[str]]) -> list[str]:
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
                cells.append(f"{label}: {cell}" if label else cell)
        if cells:
            lines.append(" | ".join(cells))
    return lines


def _with_tables(text: str, blocks: list[Block], tables: list[_Table]) -> tuple[str, list[Block]]:
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


def _markdown_tables(tokens: list, char: Callable[[int], int], text: str) -> list[_Table]:
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
        tables.append(_Table(char(token.map[0]), end, _row_lines(header, rows)))
    return tables


def _pipe_tables(text: str) -> list[_Table]:
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


def _pipe_table(run: list[tuple[int, int, str]]) -> _Table:
    lines = [content for _, _, content in run]
    has_header = len(lines) > 1 and PIPE_SEPARATOR.match(lines[1]) is not None
    cells = [
        [cell.replace("\\|", "|").strip() for cell in PIPE_CELL_SPLIT.split(line[1:-1])]
        for line in lines
        if not PIPE_SEPARATOR.match(line)
    ]
    header = cells.pop(0) if has_header and cells else None
    return _Table(run[0][0], run[-1][1], _row_lines(header, cells))


def parse_text(text: str, name: str) -> ParsedDocument:
    return ParsedDocument(text, _first_line(text) or name, _paragraph_blocks(text))


def parse_markdown(text: str, name: str) -> ParsedDocument:
    return _parse_markdown(text, name, pipe_lines=False)


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
    text, blocks = _with_tables(text, blocks, tables)
    return ParsedDocument(text, title or _first_line(text) or name, blocks)


def parse_html(data: bytes, name: str) -> ParsedDocument:
    import trafilatura

    html = decode_text(data, name, _declared_charset(data))
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
    parsed = _parse_markdown(text, name, pipe_lines=True)
    if metadata is not None and metadata.title:
        parsed.title = metadata.title[:TITLE_MAX_CHARS]
    return parsed


def _draws_lines(page: "pypdf.PageObject") -> bool:
    """Whether the page's content draws a rectangle or a line segment (a ruled table's cells):
    pdfplumber reads a page a few ten times slower than pypdf, so only such pages are read."""
    try:
        contents = page.get_contents()
        return contents is not None and DRAWS_LINES.search(contents.get_data()) is not None
    # A page whose content cannot be read again keeps pypdf's text, whatever the reason.
    except Exception:
        return False


def _pdf_tables(data: bytes, pages: list[str], ruled: list[bool]) -> list[list[_Table]]:
    """Each page's ruled tables (pdfplumber finds them by their lines), placed on the lines of
    pypdf's text of the page that hold exactly the table's characters; a table whose lines
    cannot be told apart there (text beside it) is left as pypdf wrote it. A file pdfplumber
    cannot read keeps pypdf's text: tables are a refinement, the text is already there."""
    found: list[list[_Table]] = [[] for _ in pages]
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


def _placed_tables(page: str, extracted: list[list[list[str | None]]]) -> list[_Table]:
    lines = list(re.finditer(r"[^\n]+", page))
    tables, first = [], 0
    for table in extracted:
        cells = [[cell or "" for cell in row] for row in table]
        wanted = Counter("".join("".join(row) for row in cells).replace(" ", "").replace("\n", ""))
        if not wanted or (span := _lines_holding(lines, first, wanted)) is None:
            continue
        header, rows = (cells[0], cells[1:]) if len(cells) > 1 else (None, cells)
        tables.append(
            _Table(lines[span[0]].start(), lines[span[1]].end(), _row_lines(header, rows))
        )
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
        tables += [_Table(t.start + shift, t.end + shift, t.rows) for t in page_tables]
        kept.append(page.strip())
        offset += len(kept[-1]) + 2
    text = "\n\n".join(kept)
    text, blocks = _with_tables(text, _paragraph_blocks(text), tables)
    return ParsedDocument(
        text, title.strip()[:TITLE_MAX_CHARS] or _first_line(text) or name, blocks
    )


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
            lines = _row_lines(header, body)
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
        text = decode_text(data, name)
        parsed = parse_text(text, name) if kind == "text" else parse_markdown(text, name)
    elif kind == "html":
        parsed = parse_html(data, name)
    elif kind == "pdf":
        parsed = parse_pdf(data, name)
    elif kind == "docx":
        parsed = parse_docx(data, name)
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
