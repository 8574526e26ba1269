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
    document.add_paragraph("Breakfast", style="List Bullet")
    document.add_paragraph("Keep the receipts", style="List Number")
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


ACTION_ITEMS = """Minutes of the board

Date:     13 March 2025
Place:    Leeds office

ACTION ITEMS

  #  Action                               Owner           Due
  1  Publish a public roadmap page        Elena Costa     30 April 2025
  2  Proposal for automatic credits       Lucia Ferreira
  3  Share usage figures with members     Sofia Mendes    15 May 2025

The board  meets again in June.
"""


def test_text_tables_lined_up_with_spaces_become_row_lines():
    parsed = parse_bytes(ACTION_ITEMS.encode(), "minutes.txt")
    rows = [
        "#: 1 | Action: Publish a public roadmap page | Owner: Elena Costa | Due: 30 April 2025",
        "#: 2 | Action: Proposal for automatic credits | Owner: Lucia Ferreira",  # no due date
        "#: 3 | Action: Share usage figures with members | Owner: Sofia Mendes | Due: 15 May 2025",
    ]
    blocks = [parsed.text[b.start : b.end] for b in parsed.blocks]
    assert blocks[-4:] == [*rows, "The board  meets again in June."]
    # Labels lined up are no table, and the text around the table is the file's own.
    assert parsed.text.startswith(ACTION_ITEMS[: ACTION_ITEMS.index("  #")])
    assert "Date:     13 March 2025\nPlace:    Leeds office" in parsed.text
    prose = (
        "The meeting opened at nine.  Everyone came and the chair\n"
        "welcomed the new members of the board.  Then the budget was\n"
        "discussed at length by the whole board for over an hour.  No\n"
        "decision was taken.  The next meeting is in June.\n"
    )
    assert parse_bytes(prose.encode(), "notes.txt").text == prose


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
    # List items are marked as in Markdown, so that none reads as a heading.
    assert doc.text.endswith("- Breakfast\n\n- Keep the receipts")
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
        (b"Month,CSAT\n\xff\xfe,4.4\n", "figures.csv", "not UTF-8 text"),
        (b" , ,\n,,\n", "blank.csv", "no rows"),
        (b'Month,CSAT\n"July,4.4\n' + b"x" * 200_000, "unclosed.csv", "not a readable table"),
    ],
)
def test_bad_files_get_a_clear_error(data, name, message):
    with pytest.raises(ParseError, match=message) as caught:
        parse_bytes(data, name)
    assert name in str(caught.value)


# Tables: one line per row, each cell named by its column's header.
TABLE = [
    ("Month", "Tickets", "CSAT"),
    ("July", "1,310", "4.4"),
    ("August", "1,204", "4.6"),
    ("September", "1,150", "4.7"),
]
ROW_LINES = [
    "Month: July | Tickets: 1,310 | CSAT: 4.4",
    "Month: August | Tickets: 1,204 | CSAT: 4.6",
    "Month: September | Tickets: 1,150 | CSAT: 4.7",
]
INTRO = "Ticket volume fell over the quarter while satisfaction held steady."
AFTER = "The figures after the table are provisional until audited."

TABLE_MARKDOWN = f"""# Support report

{INTRO}

## Monthly figures

| Month | Tickets | CSAT |
|-------|--------:|------|
| July | 1,310 | 4.4 |
| August | 1,204 | 4.6 |
| September | 1,150 | 4.7 |

{AFTER}
"""

TABLE_HTML = f"""<html><head><title>Support Report</title></head><body>
<nav><a href="/">Home</a> | <a href="/login">Login</a></nav>
<article><h1>Support report</h1>
<p>{INTRO}</p>
<h2>Monthly figures</h2>
<table><thead><tr><th>Month</th><th>Tickets</th><th>CSAT</th></tr></thead><tbody>
<tr><td>July</td><td>1,310</td><td>4.4</td></tr>
<tr><td>August</td><td>1,204</td><td>4.6</td></tr>
<tr><td>September</td><td>1,150</td><td>4.7</td></tr>
</tbody></table>
<p>{AFTER}</p>
</article>
<footer>Copyright 2026 Orchard Inc. All rights reserved.</footer>
</body></html>"""


def make_table_docx(rows=TABLE) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Support report", level=1)
    document.add_paragraph(INTRO)
    document.add_heading("Monthly figures", level=2)
    table = document.add_table(rows=len(rows), cols=len(rows[0]))
    for cells, row in zip(rows, table.rows, strict=True):
        for text, cell in zip(cells, row.cells, strict=True):
            cell.text = text
    document.add_paragraph(AFTER)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_table_pdf(rows=TABLE, ruled: bool = True) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.multi_cell(0, 8, "Support report", new_x="LMARGIN", new_y="NEXT")
    pdf.multi_cell(0, 8, INTRO, new_x="LMARGIN", new_y="NEXT")
    pdf.multi_cell(0, 8, "Monthly figures", new_x="LMARGIN", new_y="NEXT")
    if ruled:
        with pdf.table() as table:
            for cells in rows:
                row = table.row()
                for text in cells:
                    row.cell(text)
    else:
        for cells in rows:
            for text in cells:
                pdf.cell(50, 8, text)
            pdf.ln()
    pdf.multi_cell(0, 8, AFTER, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def assert_rows(parsed, expected=ROW_LINES):
    from ragserve.rag.sentences import sentence_spans

    table_lines = [line for line in parsed.text.splitlines() if " | " in line]
    assert table_lines == expected
    assert INTRO in parsed.text and AFTER in parsed.text
    assert "Monthly figures" in parsed.text
    blocks = [parsed.text[b.start : b.end] for b in parsed.blocks]
    sentences = [s for s, _, _ in sentence_spans(parsed.text)]
    for line in expected:
        assert line in blocks and line in sentences
    for sentence, start, end in sentence_spans(parsed.text):
        assert parsed.text[start:end] == sentence


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (TABLE_MARKDOWN.encode(), "report.md"),
        (TABLE_HTML.encode(), "report.html"),
        (make_table_docx(), "report.docx"),
        (make_table_pdf(), "report.pdf"),
    ],
)
def test_table_rows_keep_their_header(data, name):
    assert_rows(parse_bytes(data, name))


def test_markdown_table_moves_only_the_text_after_it():
    parsed = parse_bytes(TABLE_MARKDOWN.encode(), "report.md")
    table_at = TABLE_MARKDOWN.index("| Month")
    assert parsed.text[:table_at] == TABLE_MARKDOWN[:table_at]
    assert parsed.text.endswith(TABLE_MARKDOWN[TABLE_MARKDOWN.index(AFTER) :])
    assert parsed.text[table_at:].startswith(ROW_LINES[0] + "\n" + ROW_LINES[1])
    blocks = [parsed.text[b.start : b.end] for b in parsed.blocks]
    assert blocks == [
        "# Support report",
        INTRO,
        "## Monthly figures",
        *ROW_LINES,
        AFTER,
    ]
    assert [b.heading for b in parsed.blocks][:3] == [True, False, True]
    # A span before the table is the file's own characters.
    intro_at = parsed.text.index(INTRO)
    assert TABLE_MARKDOWN[intro_at : intro_at + len(INTRO)] == INTRO


def test_markdown_table_with_empty_cell_and_escaped_pipe():
    markdown = "Intro.\n\n| Item | Size | Note |\n|---|---|---|\n| Pipe a \\| b | | ok |  \nEnd."
    parsed = parse_bytes(markdown.encode(), "items.md")
    assert parsed.text == "Intro.\n\nItem: Pipe a | b | Note: ok\nItem: End."


def test_html_table_without_header_and_with_multi_line_cells():
    html = f"""<html><body><article><h1>Stock</h1><p>{INTRO}</p>
<table><tr><td>Apples</td><td>40</td><td>crates</td></tr>
<tr><td>Pears</td><td></td><td>two<br>boxes</td></tr></table>
<p>{AFTER}</p></article></body></html>"""
    parsed = parse_bytes(html.encode(), "stock.html")
    rows = [line for line in parsed.text.splitlines() if " | " in line]
    assert rows == ["Apples | 40 | crates", "Pears | two boxes"]
    assert INTRO in parsed.text and AFTER in parsed.text


def test_docx_empty_and_multi_line_cells():
    rows = [("Item", "Size", "Note"), ("Apples", "", "two\nlines"), ("Pears", "3", "")]
    parsed = parse_bytes(make_table_docx(rows), "stock.docx")
    assert parsed.text.splitlines()[-4:-2] == [
        "Item: Apples | Note: two lines",
        "Item: Pears | Size: 3",
    ]
    assert [parsed.text[b.start : b.end] for b in parsed.blocks if b.heading] == [
        "Support report",
        "Monthly figures",
    ]


def test_pdf_multi_line_and_empty_cells():
    rows = [
        ("Month", "Tickets", "Notes"),
        ("July", "1,310", "Steady"),
        ("August", "", "Peak season with a long backlog carried over from July into the autumn"),
    ]
    parsed = parse_bytes(make_table_pdf(rows), "notes.pdf")
    assert [line for line in parsed.text.splitlines() if " | " in line] == [
        "Month: July | Tickets: 1,310 | Notes: Steady",
        "Month: August | Notes: Peak season with a long backlog carried over from July into the "
        "autumn",
    ]
    assert INTRO in parsed.text and AFTER in parsed.text


def test_pdf_table_without_lines_keeps_its_text():
    parsed = parse_bytes(make_table_pdf(ruled=False), "plain.pdf")
    assert "August 1,204 4.6" in parsed.text.splitlines()
    assert INTRO in parsed.text and AFTER in parsed.text


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (
            'Month,Tickets,CSAT\nJuly,"1,310",4.4\nAugust,"1,204",4.6\n\nSeptember,"1,150",4.7\n',
            "figures.csv",
        ),
        (
            "Month;Tickets;CSAT\nJuly;1,310;4.4\nAugust;1,204;4.6\nSeptember;1,150;4.7\n",
            "figures.csv",
        ),
        (
            "Month\tTickets\tCSAT\nJuly\t1,310\t4.4\nAugust\t1,204\t4.6\nSeptember\t1,150\t4.7\n",
            "figures.tsv",
        ),
    ],
)
def test_csv_and_tsv_rows_name_their_cells(data, name):
    """Whatever the delimiter (a semicolon where numbers carry commas), a spreadsheet export
    reads as every format's tables do: a row per line and per block, each a sentence."""
    from ragserve.rag.sentences import sentence_spans

    parsed = parse_bytes(data.encode(), name)
    assert parsed.text.splitlines() == ROW_LINES
    assert [parsed.text[b.start : b.end] for b in parsed.blocks] == ROW_LINES
    assert [s for s, _, _ in sentence_spans(parsed.text)] == ROW_LINES
    assert parsed.title == "figures"


def test_csv_header_rules_and_quoted_cells():
    """The first row names the columns, years included; a first row of numbers only is data.
    A quoted cell keeps its commas and its lines join; the title is the file's name."""
    years = parse_bytes(b"Region,2023,2024\nNorway,120,130\n", "sales_by-region.csv")
    assert years.text == "Region: Norway | 2023: 120 | 2024: 130"
    assert years.title == "sales by region"
    readings = parse_bytes(b"1,20.5,0.3\n2,20.7,0.4\n", "log.csv")
    assert readings.text.splitlines() == ["1 | 20.5 | 0.3", "2 | 20.7 | 0.4"]
    notes = parse_bytes(b'Name,Note\nAda,"late, then\nearly"\n', "notes.csv")
    assert notes.text == "Name: Ada | Note: late, then early"


def test_xlsx_sheets_read_as_their_rows():
    """Each visible sheet: its name a heading, then its rows named by the header row, with
    values as a reader sees them (integers, fixed decimals, percentages, dates); hidden sheets
    are left out."""
    import datetime

    import openpyxl

    from tests.hostile_corpus import xlsx_of

    workbook = openpyxl.Workbook()
    figures = workbook.active
    figures.title = "Q3"
    figures.append(["Month", "Tickets", "Share", "Closed", "Cost (EUR)"])
    figures.append(["July", 1310.0, 0.31, datetime.datetime(2024, 7, 31), 24.9])
    figures.append([None, None, None, None, None])
    figures.append(["August", 1204, 0.275, datetime.datetime(2024, 8, 30, 14, 5), 1234.5])
    for row in (2, 4):
        figures.cell(row, 3).number_format = "0%"
    figures.cell(2, 5).number_format = "0.00"
    figures.cell(4, 5).number_format = "#,##0.00"
    hidden = workbook.create_sheet("Lookup")
    hidden.append(["Code", "Secret"])
    hidden.append(["X1", "never quoted"])
    hidden.sheet_state = "hidden"
    workbook.create_sheet("Empty")
    workbook.properties.title = "Support figures"
    out = io.BytesIO()
    workbook.save(out)
    parsed = parse_bytes(out.getvalue(), "q3.xlsx")
    assert parsed.title == "Support figures"
    assert parsed.text.splitlines() == [
        "Q3",
        "Month: July | Tickets: 1310 | Share: 31 % | Closed: 2024-07-31 | Cost (EUR): 24.90",
        "Month: August | Tickets: 1204 | Share: 27.5 % | Closed: 2024-08-30 14:05 | "
        "Cost (EUR): 1,234.50",
    ]
    blocks = [(parsed.text[b.start : b.end], b.heading) for b in parsed.blocks]
    assert blocks[0] == ("Q3", True) and all(not heading for _, heading in blocks[1:])
    untitled = parse_bytes(
        xlsx_of("Rates", ("Country", "Per diem"), ("Finland", 66)), "per_diem.xlsx"
    )
    assert untitled.title == "per diem"
    assert untitled.text == "Rates\nCountry: Finland | Per diem: 66"


def test_a_row_line_reads_back_as_its_cells():
    from ragserve.rag.parsers.tables import row_cells, row_lines

    header = ["Leave type", "Notes"]
    [line] = row_lines(header, [["Extra holiday", "From the year: you turn 60"]])
    assert row_cells(line) == [
        ("Leave type", "Extra holiday"),
        ("Notes", "From the year: you turn 60"),
    ]
    assert row_cells("August | 1,204 | 4.6") is None  # a table without a header
    assert row_cells("Decision: approved.") is None  # one labelled line is no row
