"""Writes the two binary documents of the everyday set, medicine-leaflet.pdf (fpdf2) and
e-bike-manual.docx (python-docx), from the text below.

The output is deterministic: fixed metadata dates in both and fixed zip entry times in the
docx, so a rebuild gives the same bytes as the committed files. Run from the repository root:

    .venv/bin/python datasets/everyday/build_documents.py
"""

import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from office_files import sectioned_docx, titled_pdf

DOCUMENTS = Path(__file__).parent / "documents"
WRITTEN = datetime(2025, 9, 1, 8, 0, 0, tzinfo=UTC)

# The PDF core fonts are Latin-1: no dashes or euro signs here.
LEAFLET_TITLE = "Package leaflet: information for the user - Dolorex 500 mg tablets"
LEAFLET_SECTIONS = [
    (
        None,
        [
            "Paracetamol 500 mg. Read all of this leaflet carefully before you start taking "
            "this medicine. Keep this leaflet; you may need to read it again.",
        ],
    ),
    (
        "1. What Dolorex is and what it is used for",
        [
            "Dolorex contains paracetamol, which relieves pain and lowers fever. It is used for "
            "headache, toothache, period pain, muscle pain and colds.",
        ],
    ),
    (
        "2. What you need to know before you take Dolorex",
        [
            "Do not take Dolorex if you are allergic to paracetamol or if you have severe liver "
            "disease.",
            "Do not drink alcohol while you take this medicine.",
            "Dolorex can be used during pregnancy and breastfeeding at the lowest dose that "
            "works, for the shortest time possible.",
        ],
    ),
    (
        "3. How to take Dolorex",
        [
            "Adults and children over 12 years: 1 to 2 tablets every 4 to 6 hours as needed.",
            "Do not take more than 8 tablets (4 g paracetamol) in 24 hours.",
            "Children under 12 years should not take these tablets; ask a pharmacist about a "
            "syrup.",
            "Swallow the tablets whole with a glass of water. They may be taken with or "
            "without food.",
            "If your pain or fever lasts more than 3 days, see a doctor.",
            "If you take too many tablets, contact a doctor or the poison information centre "
            "at once, even if you feel well, because of the risk of liver damage.",
        ],
    ),
    (
        "4. Possible side effects",
        [
            "Side effects are rare. Skin rash affects fewer than 1 in 1,000 people. Stop taking "
            "the tablets and see a doctor if you get a rash or swelling of the face.",
        ],
    ),
    (
        "5. How to store Dolorex",
        [
            "Store below 25 degrees C in the original package. Do not use the tablets after the "
            "expiry date printed on the carton after EXP.",
        ],
    ),
    (
        "6. Contents of the pack",
        [
            "Each tablet contains 500 mg paracetamol. The other ingredients are maize starch, "
            "povidone and magnesium stearate. Packs of 10, 20 and 30 tablets. Marketing "
            "authorisation holder: Nordkap Pharma AS, Bergen.",
        ],
    ),
]

MANUAL_TITLE = "Veloxa City e-bike: owner's manual"
# (heading or None, paragraphs); a paragraph that starts with "- " is a list item.
MANUAL_SECTIONS = [
    (
        None,
        [
            "Thank you for choosing the Veloxa City. Read this manual before your first ride.",
        ],
    ),
    (
        "Battery and charging",
        [
            "The 500 Wh battery charges fully in about 5 hours with the supplied 4 A charger.",
            "Charge the battery only indoors at temperatures between 10 and 30 degrees.",
            "On a full charge the bike has a range of 60 to 110 km, depending on the assist "
            "level, the rider's weight and the terrain.",
            "If you store the bike for the winter, leave the battery at about 60 % and top it "
            "up every three months.",
        ],
    ),
    (
        "Riding",
        [
            "The motor assists up to 25 km/h, as the law requires; above that speed you pedal "
            "on your own.",
            "Choose one of four assist levels with the + and - buttons on the handlebar:",
            "- Eco for the longest range",
            "- Tour for everyday riding",
            "- Sport for hills",
            "- Turbo for maximum support",
            "Hold the - button for two seconds to switch on the walk assist, which pushes the "
            "bike at up to 6 km/h.",
        ],
    ),
    (
        "Tyres and brakes",
        [
            "Inflate the tyres to 3.5 to 5 bar; the value is printed on the side of the tyre.",
            "The hydraulic disc brakes need new pads when the pad material is thinner than 0.5 mm.",
        ],
    ),
    (
        "Maintenance",
        [
            "Have the bike serviced by a dealer after the first 300 km, then once a year.",
            "Clean the chain every 200 km and oil it after cleaning.",
            "Never clean the bike with a pressure washer: water can get into the motor and "
            "the battery contacts.",
        ],
    ),
    (
        "Warranty",
        [
            "The frame has a lifetime warranty for the first owner. The motor and the battery "
            "are covered for 2 years or 500 charging cycles, whichever comes first.",
            "The warranty does not cover wear parts such as tyres, brake pads and the chain.",
        ],
    ),
]


def build_pdf(path: Path) -> None:
    pdf = titled_pdf(LEAFLET_TITLE, "Nordkap Pharma AS", WRITTEN)
    for heading, paragraphs in LEAFLET_SECTIONS:
        if heading:
            pdf.set_font("Helvetica", "B", 12)
            pdf.multi_cell(0, 8, heading, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=11)
        for paragraph in paragraphs:
            pdf.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(2)
    pdf.output(str(path))


def build_docx(path: Path) -> None:
    sectioned_docx(path, MANUAL_TITLE, "Veloxa Bikes", MANUAL_SECTIONS, WRITTEN)


def main() -> None:
    DOCUMENTS.mkdir(parents=True, exist_ok=True)
    build_pdf(DOCUMENTS / "medicine-leaflet.pdf")
    build_docx(DOCUMENTS / "e-bike-manual.docx")


if __name__ == "__main__":
    main()
