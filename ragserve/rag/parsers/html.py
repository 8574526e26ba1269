"""HTML pages: the main content trafilatura finds, boilerplate (menus, footers) dropped.

trafilatura writes the content as Markdown, which is then parsed as Markdown is, so a page's
blocks and headings come out as a Markdown file's do. A table's header is the cells trafilatura
marks as headings (<th>) in its first row; without them it has none. The page is decoded by its
byte-order mark or the charset its <meta> declares, as a browser would.
"""

from ragserve.rag.parsers.decoding import declared_charset, decode_text
from ragserve.rag.parsers.document import TITLE_MAX_CHARS, ParsedDocument, ParseError
from ragserve.rag.parsers.markup import parse_extracted_markdown


def parse_html(data: bytes, name: str) -> ParsedDocument:
    import trafilatura

    html = decode_text(data, name, declared_charset(data))
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
    parsed = parse_extracted_markdown(text, name)
    if metadata is not None and metadata.title:
        parsed.title = metadata.title[:TITLE_MAX_CHARS]
    return parsed
