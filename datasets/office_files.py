"""What the dev sets' build scripts share: a PDF started with fixed metadata and its title, a
question-and-answer FAQ and a sectioned document written as Word files, and zip archives
(docx, xlsx) whose entries carry a fixed time, so that a rebuild gives the same bytes as the
committed file."""

import io
import zipfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import docx
from docx.shared import Pt
from fpdf import FPDF

# (heading, [(question, answer), ...]); a None question marks the table's place.
FaqSections = Sequence[tuple[str, Sequence[tuple[str | None, str]]]]


def faq_docx(
    path: Path,
    title: str,
    author: str,
    intro: str,
    sections: FaqSections,
    table: tuple[Sequence[str], Sequence[Sequence[str]]],
    written: datetime,
) -> None:
    """The FAQ as a docx: the title, the intro, each section a heading over its questions (as
    smaller headings) and answers, and the one table (a bold header row, then its rows)."""
    header, rows = table
    document = _titled_docx(title, author, written)
    document.add_paragraph(intro)
    for heading, entries in sections:
        document.add_heading(heading, level=1)
        for question, answer in entries:
            if question is None:
                grid = document.add_table(rows=1, cols=len(header))
                grid.style = "Table Grid"
                for cell, text in zip(grid.rows[0].cells, header, strict=True):
                    cell.text = text
                    cell.paragraphs[0].runs[0].bold = True
                for row in rows:
                    for cell, text in zip(grid.add_row().cells, row, strict=True):
                        cell.text = text
                continue
            document.add_heading(question, level=2)
            document.add_paragraph(answer)
    _save(document, path, written)


# (heading or None, paragraphs): a paragraph that starts with "- " is a bulleted item, one
# that is a sequence of rows a table (a grid, its first row the header).
Sections = Sequence[tuple[str | None, Sequence[str | Sequence[Sequence[str]]]]]


def sectioned_docx(
    path: Path, title: str, author: str, sections: Sections, written: datetime
) -> None:
    """A document as a docx: the title, then each section a heading over its paragraphs,
    bulleted items and tables."""
    document = _titled_docx(title, author, written)
    for heading, paragraphs in sections:
        if heading:
            document.add_heading(heading, level=1)
        for paragraph in paragraphs:
            if not isinstance(paragraph, str):
                grid = document.add_table(rows=0, cols=len(paragraph[0]))
                grid.style = "Table Grid"
                for row in paragraph:
                    for cell, text in zip(grid.add_row().cells, row, strict=True):
                        cell.text = text
            elif paragraph.startswith("- "):
                document.add_paragraph(paragraph[2:], style="List Bullet")
            else:
                document.add_paragraph(paragraph)
    _save(document, path, written)


def _titled_docx(title: str, author: str, written: datetime) -> docx.document.Document:
    """A docx with fixed core properties, opened by its title."""
    document = docx.Document()
    document.styles["Normal"].font.size = Pt(11)
    properties = document.core_properties
    properties.title = title
    properties.author = properties.last_modified_by = author
    properties.created = properties.modified = written.replace(tzinfo=None)
    properties.revision = 1
    document.add_heading(title, level=0)
    return document


def _save(document: docx.document.Document, path: Path, written: datetime) -> None:
    saved = io.BytesIO()
    document.save(saved)
    path.write_bytes(fixed_zip_times(saved.getvalue(), written))


def fixed_zip_times(data: bytes, written: datetime) -> bytes:
    """The same archive with every entry dated `written`, so the bytes do not depend on when
    the file was built."""
    when = written.timetuple()[:6]
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(data)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            entry = zipfile.ZipInfo(info.filename, when)
            entry.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(entry, source.read(info))
    return out.getvalue()


def titled_pdf(title: str, author: str, written: datetime) -> FPDF:
    """A PDF with fixed metadata (so a rebuild gives the same bytes) and its first page
    opened by the title in bold, the font left for the body to set."""
    pdf = FPDF()
    pdf.set_creation_date(written)
    pdf.set_title(title)
    pdf.set_author(author)
    pdf.set_creator("build_documents.py")
    pdf.set_producer("fpdf2")
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.multi_cell(0, 10, title, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(2)
    return pdf
