"""Writes the three binary documents of the assorted set, parental-leave-policy.docx
(python-docx, with a Word table and a bulleted list), datasheet.pdf (fpdf2, with a ruled
specifications table) and price-list.xlsx (openpyxl, two sheets), from the text below.

The output is deterministic: fixed metadata dates in all three and fixed zip entry times in the
docx and the xlsx, so a rebuild gives the same bytes as the committed files. Run from the
repository root:

    .venv/bin/python datasets/assorted/build_documents.py
"""

import io
import re
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from openpyxl import Workbook
from openpyxl.styles import Font

sys.path.insert(0, str(Path(__file__).parents[1]))
from office_files import Sections, fixed_zip_times, sectioned_docx, titled_pdf

DOCUMENTS = Path(__file__).parent / "documents"
WRITTEN = datetime(2025, 3, 1, 8, 0, 0, tzinfo=UTC)

POLICY_TITLE = "Brightwater Analytics Ltd - Parental Leave Policy"
POLICY_SECTIONS: Sections = [
    (
        None,
        [
            "Policy reference HR-POL-017, version 3.2. Effective from 1 January 2025. "
            "Owner: People Team.",
        ],
    ),
    (
        "1. Purpose and scope",
        [
            "This policy explains the leave and pay available to employees who become parents "
            "through birth or adoption. It applies to all permanent and fixed-term employees of "
            "Brightwater Analytics Ltd in the United Kingdom. Contractors and agency workers are "
            "not covered.",
        ],
    ),
    (
        "2. Primary carer leave",
        [
            "The primary carer (the birth mother, or the main adopter) may take up to 52 weeks "
            "of leave in total, whatever their length of service. Leave can start at the "
            "earliest 11 weeks before the expected week of childbirth. Brightwater tops up "
            "statutory pay to enhanced pay according to your length of continuous service on "
            "the date your leave starts, as shown below. Any remaining weeks up to week 39 are "
            "paid at the statutory rate; weeks 40 to 52 are unpaid.",
            [
                ("Continuous service when leave starts", "Weeks at full pay", "Weeks at half pay"),
                ("Less than 1 year", "0 (statutory pay only)", "0"),
                ("1 year to less than 2 years", "8", "8"),
                ("2 years to less than 5 years", "14", "12"),
                ("5 years or more", "20", "10"),
            ],
        ],
    ),
    (
        "3. Partner leave",
        [
            "Partners of a birth mother or adopter, including same-sex partners, may take 4 "
            "weeks of partner leave at full pay, provided they have at least 26 weeks of "
            "continuous service by the 15th week before the expected week of childbirth. "
            "Partner leave must be taken within 12 months of the birth or placement and may be "
            "split into no more than 2 blocks of at least 1 week each.",
        ],
    ),
    (
        "4. Notice and documents",
        [
            "Please tell your line manager and the People Team no later than the end of the "
            "15th week before the expected week of childbirth, or within 7 days of being "
            "matched with a child for adoption. You will need to provide:",
            "- a MATB1 certificate from your midwife or GP (birth mothers);",
            "- the matching certificate from your adoption agency (adopters);",
            "- the completed Parental Leave Request form from the HR portal, showing your "
            "planned start date;",
            "- a signed self-certificate for partner leave (partners).",
            "If you want to change your return date, give at least 8 weeks' notice in writing.",
        ],
    ),
    (
        "5. During and after your leave",
        [
            "You may work up to 10 Keeping in Touch (KIT) days during your leave without it "
            "ending; each KIT day is paid at your normal daily rate. Holiday continues to build "
            "up throughout your leave. On your return you may use a phased return of up to 4 "
            "weeks, working 60% of your normal hours on full pay.",
            "If you do not return to work for at least 6 months after your leave, you must "
            "repay any enhanced pay you received above statutory pay. Statutory pay never has "
            "to be repaid.",
        ],
    ),
    (
        "6. Contacts",
        [
            "Questions about this policy: Priya Raman, People Partner, "
            "priya.raman@brightwater-analytics.co.uk, internal extension 4410. Payroll "
            "queries: payroll@brightwater-analytics.co.uk.",
        ],
    ),
]

# The PDF core fonts are Latin-1: no dashes or euro signs here.
DATASHEET_TITLE = "Kestrel PT-400 Pressure Transmitter"
DATASHEET_INTRO = "Datasheet DS-PT400-EN, revision C, 02/2025 \u00b7 Altmark Messtechnik GmbH"
DESCRIPTION = (
    "The Kestrel PT-400 is a compact pressure transmitter for hydraulic systems, compressors "
    "and test benches. A thin-film sensor welded into a stainless-steel housing measures "
    "relative pressure in liquids and gases and converts it into a 4-20 mA two-wire signal. "
    "The device has no internal seals in contact with the medium, is resistant to shock and "
    "vibration, and is delivered factory-calibrated with a test certificate. Order code for "
    "the standard version: PT-400-G14-M12."
)
SPECIFICATIONS = [
    ("Parameter", "Value", "Unit"),
    ("Measuring range", "0 ... 400", "bar"),
    ("Overload pressure", "800", "bar"),
    ("Burst pressure", "1,600", "bar"),
    ("Accuracy (incl. non-linearity, hysteresis)", "\u00b1 0.25", "% FS"),
    ("Long-term stability", "\u00b1 0.1", "% FS per year"),
    ("Output signal", "4 ... 20 (2-wire)", "mA"),
    ("Supply voltage", "10 ... 30", "V DC"),
    ("Response time", "< 2", "ms"),
    ("Operating temperature", "-40 ... +85", "\u00b0C"),
    ("Medium temperature", "-40 ... +125", "\u00b0C"),
    ("Ingress protection", "IP67", "-"),
    ("Process connection", "G 1/4 male thread", "-"),
    ("Electrical connection", "M12 x 1, 4-pin", "-"),
    ("Wetted parts / housing", "Stainless steel 1.4404 (316L)", "-"),
    ("Weight", "120", "g"),
]
WARRANTY = (
    "Altmark Messtechnik grants a warranty of 36 months from the date of delivery. The "
    "warranty does not cover damage caused by pressure above the overload limit of 800 bar, by "
    "incorrect wiring, by media that attack stainless steel 1.4404, or by opening the housing. "
    "Before returning a device, please request a return authorisation (RMA) number from our "
    "service team: +49 351 4178 220, Monday to Thursday 07:30-16:30 and Friday 07:30-14:00 "
    "(CET), or service@altmark-mt.de. Devices sent without an RMA number cannot be processed."
)
IMPRINT = (
    "Altmark Messtechnik GmbH, Lohrmannstrasse 12, 01237 Dresden, Germany. Specifications "
    "subject to change without notice."
)

PRICES = [
    ("Item", "Size", "Price (EUR)", "Available"),
    ("Interior wall paint, matt white", "2.5 L", 24.90, "Yes"),
    ("Interior wall paint, matt white", "10 L", 79.00, "Yes"),
    ("Kitchen & bathroom paint, satin white", "2.5 L", 32.50, "Yes"),
    ("Exterior masonry paint, stone grey", "5 L", 58.90, "Yes"),
    ("Exterior masonry paint, stone grey", "10 L", 104.00, "No"),
    ("Wood varnish, clear gloss", "750 ml", 16.40, "Yes"),
    ("Wood varnish, clear gloss", "2.5 L", 42.80, "Yes"),
    ("Floor paint, slate grey", "2.5 L", 46.50, "No"),
    ("Primer, multi-surface", "1 L", 13.90, "Yes"),
    ("Primer, multi-surface", "5 L", 49.00, "Yes"),
    ("Radiator enamel, white", "500 ml", 14.75, "Yes"),
    ("Masking tape, 38 mm", "50 m roll", 4.20, "Yes"),
    ("Paint roller set, 25 cm", "Set of 5 pieces", 18.60, "Yes"),
    ("Brush set, synthetic", "Set of 3", 11.95, "No"),
    ("Dust sheet, cotton", "3.6 x 2.7 m", 15.30, "Yes"),
    ("Filler, ready-mixed", "1 kg", 8.40, "Yes"),
]
PRICE_NOTES = [
    "Farbenhaus Lindner GmbH - retail price list",
    "Prices valid from 1 March 2025 to 30 June 2025.",
    "All prices include 19% VAT.",
    "Items marked 'No' are out of stock in the shop but can be ordered; delivery time about 10 "
    "working days.",
    "Tinting of wall and masonry paints to any RAL or NCS colour: EUR 3.00 per tin, ready in "
    "about 15 minutes.",
    "Delivery within Leipzig: EUR 6.50 per order, free for orders over EUR 150.",
    "Unopened, untinted tins can be returned within 14 days with the receipt. Tinted paint "
    "cannot be returned.",
    "Trade customers with a Lindner trade card receive their discount at the till; it is not "
    "shown in this list.",
    "Shop: Lindenallee 8, 04109 Leipzig. Tel. +49 341 2209 115.",
    "Opening hours: Mon-Fri 08:00-18:30, Sat 09:00-14:00.",
]


def build_docx(path: Path) -> None:
    sectioned_docx(path, POLICY_TITLE, "People Team", POLICY_SECTIONS, WRITTEN)


def build_pdf(path: Path) -> None:
    pdf = titled_pdf(DATASHEET_TITLE, "Altmark Messtechnik GmbH", WRITTEN)
    pdf.set_font("Helvetica", size=10)
    pdf.multi_cell(0, 6, DATASHEET_INTRO, new_x="LMARGIN", new_y="NEXT")
    for heading, body in (("Description", DESCRIPTION), ("Technical specifications", None)):
        pdf.ln(3)
        pdf.set_font("Helvetica", "B", 12)
        pdf.multi_cell(0, 8, heading, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=10)
        if body:
            pdf.multi_cell(0, 5, body, new_x="LMARGIN", new_y="NEXT")
    with pdf.table(col_widths=(80, 60, 30), text_align="LEFT") as table:
        for row in SPECIFICATIONS:
            cells = table.row()
            for text in row:
                cells.cell(text)
    pdf.ln(3)
    pdf.set_font("Helvetica", "B", 12)
    pdf.multi_cell(0, 8, "Warranty and service", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=10)
    pdf.multi_cell(0, 5, WARRANTY, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(2)
    pdf.set_font("Helvetica", "I", 9)
    pdf.multi_cell(0, 5, IMPRINT, new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(path))


def build_xlsx(path: Path) -> None:
    workbook = Workbook()
    workbook.properties.creator = "Farbenhaus Lindner GmbH"
    workbook.properties.created = workbook.properties.modified = WRITTEN.replace(tzinfo=None)
    prices = workbook.active
    prices.title = "Prices 2025"
    for row in PRICES:
        prices.append(list(row))
    for cell in prices[1]:
        cell.font = Font(bold=True)
    for (cell,) in prices.iter_rows(min_row=2, min_col=3, max_col=3):
        cell.number_format = "0.00"
    notes = workbook.create_sheet("Notes")
    for line in PRICE_NOTES:
        notes.append([line])
    saved = io.BytesIO()
    workbook.save(saved)
    path.write_bytes(fixed_zip_times(_modified_when_written(saved.getvalue()), WRITTEN))


def _modified_when_written(xlsx: bytes) -> bytes:
    """The workbook with its modification date set to WRITTEN (openpyxl dates it when saving)."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(xlsx)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "docProps/core.xml":
                stamp = WRITTEN.strftime("%Y-%m-%dT%H:%M:%SZ")
                data = re.sub(rb"(<dcterms:modified[^>]*>)[^<]*", rb"\g<1>" + stamp.encode(), data)
            target.writestr(info, data)
    return out.getvalue()


def main() -> None:
    DOCUMENTS.mkdir(parents=True, exist_ok=True)
    build_docx(DOCUMENTS / "parental-leave-policy.docx")
    build_pdf(DOCUMENTS / "datasheet.pdf")
    build_xlsx(DOCUMENTS / "price-list.xlsx")


if __name__ == "__main__":
    main()
