"""Each parser on a real small file made here."""

import io

import pytest

from ragserve.rag.parsers import ParseError, parse_bytes

HTML = """<html><head><title>Orchard Guide</title></head><body>
<nav><a href="/">Home</a> | <a href="/shop">Shop</a> | <a href="/login">Login</a></nav>
<div class="cookie-banner">We use cookies to improve your experience. Accept all cookies.</div>
<article><h1>Growing apples</h1>
<p>Apple trees need full sun and well-drained soil to produce a good harvest every autumn.</p>
<p>Prune the branches in late winter, before the buds open, to keep the canopy open.</p>
<h2>Pests</h2>
<p>Codling moths are the most common pest; pheromone traps help to monitor them.</p>
</article>
<footer>Copyright 2026 Orchard Inc. All rights reserved. Privacy policy. Terms.</footer>
</body></html>"""


def make_pdf() -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title("Pump Manual")
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.multi_cell(0, 10, "The pump must be primed before first use.")
    pdf.add_page()
    pdf.multi_cell(0, 10, "Replace the seal every 500 hours of operation.")
    return bytes(pdf.output())


def make_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Travel Policy", level=1)
    document.add_paragraph("Economy class is required for flights under six hours.")
    document.add_heading("Meals", level=2)
    document.add_paragraph("Meals are reimbursed up to 50 euros a day.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_text_and_markdown_keep_the_source_text():
    text = "First line title\n\nSecond paragraph here.\nStill second.\n\nThird."
    parsed = parse_bytes(text.encode(), "notes.txt")
    assert parsed.text == text and parsed.title == "First line title"
    assert [parsed.text[b.start : b.end] for b in parsed.blocks] == [
        "First line title",
        "Second paragraph here.\nStill second.",
        "Third.",
    ]
    markdown = "# Guide\n\nIntro text.\n\n## Setup\n\nRun the installer.\n"
    parsed = parse_bytes(markdown.encode(), "guide.md")
    assert parsed.text == markdown and parsed.title == "Guide"
    headings = [parsed.text[b.start : b.end] for b in parsed.blocks if b.heading]
    assert headings == ["# Guide", "## Setup"]


def test_html_drops_boilerplate():
    parsed = parse_bytes(HTML.encode(), "page.html")
    assert "full sun" in parsed.text and "Codling moths" in parsed.text
    for boilerplate in ("cookies", "Copyright", "Login"):
        assert boilerplate not in parsed.text
    assert parsed.title in ("Orchard Guide", "Growing apples")
    assert any(b.heading for b in parsed.blocks)


def test_pdf_and_docx():
    pdf = parse_bytes(make_pdf(), "manual.pdf")
    assert "primed before first use" in pdf.text and "every 500 hours" in pdf.text
    assert pdf.title == "Pump Manual"
    doc = parse_bytes(make_docx(), "policy.docx")
    assert doc.title == "Travel Policy"
    assert "50 euros" in doc.text
    assert [doc.text[b.start : b.end] for b in doc.blocks if b.heading] == [
        "Travel Policy",
        "Meals",
    ]


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        (b"%PDF-1.4 this is not really a pdf", "broken.pdf", "not a readable PDF"),
        (b"PK\x03\x04 garbage", "broken.docx", "not a readable docx"),
        (b"\x89PNG\r\n\x1a\n\x00\x00binary", "image.txt", "not UTF-8 text"),
        (b"   \n  ", "empty.md", "empty"),
        (b"data", "archive.zip", "unsupported file type"),
    ],
)
def test_bad_files_get_a_clear_error(data, name, message):
    with pytest.raises(ParseError, match=message) as caught:
        parse_bytes(data, name)
    assert name in str(caught.value)
