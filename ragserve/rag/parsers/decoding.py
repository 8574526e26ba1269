"""Bytes to text, strictly: a byte-order mark, an HTML page's declared charset, else UTF-8.

A guessed encoding would store garbled text that citations then quote, so bytes that are not
valid in the one encoding a file names (or UTF-8) are the file's error, not something to repair.
"""

import codecs
import re

from ragserve.rag.parsers.document import ParseError, unstorable

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


def declared_charset(html: bytes) -> str | None:
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
