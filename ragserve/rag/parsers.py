"""Turn files into text with structure: txt, Markdown, HTML, PDF and docx.

The parsed text is what chunks, spans and citations refer to. For txt and Markdown it is the
file itself, so a span points at the exact source characters; for HTML (main content found by
trafilatura, boilerplate dropped), PDF (pypdf) and docx (python-docx) it is the extracted text.
Blocks mark paragraphs and headings, for chunking that does not straddle a heading.

Files are untrusted: whatever a file holds, parsing it either returns text or raises ParseError
naming the file and the reason. Text is decoded strictly (a byte-order mark, an HTML page's
declared charset, else UTF-8); a guessed encoding would store garbled text that citations then
quote.
"""

import codecs
import io
import re
import zipfile
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


def parse_docx(data: bytes, name: str) -> ParsedDocument:
    import docx

    package = _repacked(data, name)
    try:
        document = docx.Document(io.BytesIO(package))
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
