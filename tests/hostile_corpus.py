"""A corpus of hostile files, generated (never stored): damaged PDF, docx and HTML, zip bombs,
text in other encodings, deeply nested Markdown, broken CSV and xlsx, empty files and binary
garbage.

Each file says what a parser must make of it: `error` (a ParseError whose message names the file
and contains the given words), `text` (parsed, and its text contains the given words), or
`either` (a damaged file that a lenient parser may partly recover). Nothing may raise anything
else, hang, or inflate a bomb.
"""

import codecs
import io
import random
import struct
import zipfile
import zlib
from dataclasses import dataclass
from functools import cache
from typing import Literal

Expect = Literal["error", "text", "either"]
# Where truncated copies are cut, as fractions of the valid file.
CUTS = (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
FLIPPED_COPIES = 12
DEEP = 10_000
# Nesting one level a line grows as its square (and each line is a chunk of its own to embed).
LADDER = 40
BOMB_BYTES = 300 << 20
CLAIMED_BYTES = 1024


@dataclass(frozen=True)
class HostileFile:
    name: str
    data: bytes
    expect: Expect
    words: str = ""


def pdf_of(title: str, *paragraphs: str) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title(title)
    pdf.set_font("Helvetica", size=12)
    for paragraph in paragraphs:
        pdf.add_page()
        pdf.multi_cell(0, 10, paragraph)
    return bytes(pdf.output())


def docx_of(title: str, *paragraphs: str) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading(title, level=1)
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def html_of(title: str, *paragraphs: str) -> bytes:
    body = "".join(f"<p>{paragraph}</p>" for paragraph in paragraphs)
    return (
        f"<html><head><title>{title}</title></head><body><nav><a href='/'>Home</a></nav>"
        f"<article><h1>{title}</h1>{body}</article><footer>Copyright 2026</footer></body></html>"
    ).encode()


def xlsx_of(sheet: str, *rows: tuple[object, ...]) -> bytes:
    import openpyxl

    workbook = openpyxl.Workbook()
    workbook.active.title = sheet
    for row in rows:
        workbook.active.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


# The valid files that the damaged ones are made from.
PDF = pdf_of("Pump Manual", "Prime the pump before first use.", "Replace the seal every 500 h.")
DOCX = docx_of("Travel Policy", "Economy class is required for flights under six hours.")
HTML = html_of(
    "Orchard Guide",
    "Apple trees need full sun and well-drained soil to produce a good harvest every autumn.",
    "Prune the branches in late winter, before the buds open, to keep the canopy open.",
)


def _truncated(name: str, data: bytes, expect: Expect) -> list[HostileFile]:
    stem, suffix = name.rsplit(".", 1)
    return [
        HostileFile(f"{stem}-cut{round(cut * 100)}.{suffix}", data[: int(len(data) * cut)], expect)
        for cut in CUTS
    ]


def _flipped(name: str, data: bytes, seed: int) -> list[HostileFile]:
    """Copies with 1 to 32 random bytes overwritten: a damaged download or disk."""
    rng = random.Random(seed)
    stem, suffix = name.rsplit(".", 1)
    copies = []
    for i in range(FLIPPED_COPIES):
        damaged = bytearray(data)
        for _ in range(rng.choice((1, 4, 32))):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        copies.append(HostileFile(f"{stem}-flip{i}.{suffix}", bytes(damaged), "either"))
    return copies


def docx_bomb(unpacked: int = BOMB_BYTES) -> bytes:
    """A valid docx whose document.xml holds `unpacked` bytes of whitespace (a few hundred kB
    packed)."""
    source = zipfile.ZipFile(io.BytesIO(DOCX))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb:
        for info in source.infolist():
            part = source.read(info)
            if info.filename != "word/document.xml":
                bomb.writestr(info.filename, part)
                continue
            head, _, tail = part.partition(b"<w:body>")
            with bomb.open(info.filename, "w") as inflated:
                inflated.write(head + b"<w:body>")
                block = b" " * (1 << 20)
                for _ in range(unpacked >> 20):
                    inflated.write(block)
                inflated.write(tail)
    return out.getvalue()


def lying_bomb(bomb: bytes, matching_crc: bool) -> bytes:
    """The bomb with document.xml claiming to unpack to 1 kB (in its local header and its
    central directory entry), and with matching_crc the checksum of its first kB too, so that
    neither the directory nor a CRC check betrays it."""
    name = b"word/document.xml"
    with zipfile.ZipFile(io.BytesIO(bomb)) as archive, archive.open(name.decode()) as part:
        crc = zlib.crc32(part.read(CLAIMED_BYTES))
    patched = bytearray(bomb)
    # (signature, offsets of the CRC, the unpacked size and the name) in each kind of header
    for signature, crc_at, size_at, name_at in (
        (b"PK\x03\x04", 14, 22, 30),
        (b"PK\x01\x02", 16, 24, 46),
    ):
        at = patched.find(signature)
        while at != -1:
            if patched[at + name_at : at + name_at + len(name)] == name:
                struct.pack_into("<I", patched, at + size_at, CLAIMED_BYTES)
                if matching_crc:
                    struct.pack_into("<I", patched, at + crc_at, crc)
            at = patched.find(signature, at + 4)
    return bytes(patched)


def _billion_laughs_docx() -> bytes:
    """A docx whose document.xml defines nested entities (the "billion laughs" XML bomb)."""
    source = zipfile.ZipFile(io.BytesIO(DOCX))
    entities = ['<!ENTITY lol0 "lol">'] + [
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
    ]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as docx:
        for info in source.infolist():
            part = source.read(info)
            if info.filename == "word/document.xml":
                declaration, _, rest = part.partition(b"?>")
                doctype = f"<!DOCTYPE w:document [{''.join(entities)}]>".encode()
                rest = rest.replace(b"Economy class", b"&lol9; Economy class", 1)
                part = declaration + b"?>" + doctype + rest
            docx.writestr(info.filename, part)
    return out.getvalue()


def _xlsx_cases(bomb: bytes) -> list[HostileFile]:
    """A docx bomb named .xlsx, garbage, a truncated workbook and one whose sheet defines the
    "billion laughs" entities (defusedxml refuses any entity declaration)."""
    rng = random.Random(7)
    valid = xlsx_of("Rates", ("Country", "Per diem"), ("Finland", 66))
    source = zipfile.ZipFile(io.BytesIO(valid))
    entities = "".join(
        ['<!ENTITY lol0 "lol">']
        + [f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)]
    )
    laughs = io.BytesIO()
    with zipfile.ZipFile(laughs, "w", zipfile.ZIP_DEFLATED) as workbook:
        for info in source.infolist():
            part = source.read(info)
            if info.filename == "xl/worksheets/sheet1.xml":
                doctype = f"<!DOCTYPE worksheet [{entities}]>".encode()
                part = doctype + part.replace(b"<t>Finland</t>", b"<t>&lol9; Finland</t>", 1)
            workbook.writestr(info.filename, part)
    return [
        HostileFile("bomb.xlsx", bomb, "error", "zip bomb"),
        HostileFile("garbage.xlsx", bytes(rng.randrange(256) for _ in range(4096)), "error"),
        HostileFile("truncated.xlsx", valid[: len(valid) // 2], "error", "not a readable xlsx"),
        HostileFile("laughs.xlsx", laughs.getvalue(), "error", "not a readable xlsx"),
        HostileFile("empty.xlsx", b"", "error", "empty"),
    ]


def _encodings() -> list[HostileFile]:
    text = "Café crème: “smart quotes” cost 5 €.\n\nThe canteen opens at noon.\n"
    page = (
        "<html><head>{meta}<title>Menu</title></head><body><article><h1>Menu</h1>"
        "<p>Café crème brûlée is served at noon every Friday in the canteen.</p>"
        "<p>The canteen closes at three in the afternoon on public holidays.</p>"
        "</article></body></html>"
    )
    latin1 = page.format(meta='<meta charset="iso-8859-1">')
    return [
        HostileFile("latin1.txt", "Café au lait\n".encode("latin-1"), "error", "not UTF-8"),
        HostileFile("cp1252.md", text.encode("cp1252"), "error", "not UTF-8"),
        HostileFile("utf16-le-bom.txt", text.encode("utf-16"), "text", "smart quotes"),
        HostileFile(
            "utf16-be-bom.md", codecs.BOM_UTF16_BE + text.encode("utf-16-be"), "text", "Café"
        ),
        HostileFile("utf32-bom.txt", text.encode("utf-32"), "text", "5 €"),
        HostileFile("utf8-bom.md", codecs.BOM_UTF8 + text.encode(), "text", "Café"),
        HostileFile("utf16-no-bom.txt", text.encode("utf-16-le"), "error", "not UTF-8"),
        HostileFile("mixed.txt", text.encode() + "Dès".encode("latin-1"), "error", "offset"),
        HostileFile("invalid-start.md", b"ok \x80\x81 bytes", "error", "0x80"),
        HostileFile("overlong.txt", b"slash \xc0\xaf here", "error", "0xc0"),
        HostileFile("encoded-surrogate.txt", b"half \xed\xa0\x80 pair", "error", "0xed"),
        HostileFile("cut-sequence.txt", "fin de l’été".encode()[:-1], "error", "0xc3"),
        HostileFile("nul.txt", b"text with a \x00 NUL inside", "error", "NUL"),
        HostileFile("latin1-undeclared.html", page.format(meta="").encode("latin-1"), "error"),
        HostileFile("latin1-declared.html", latin1.encode("latin-1"), "text", "brûlée"),
        HostileFile(
            "cp1252-declared.html",
            page.format(
                meta='<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">'
            )
            .replace("Café", "“Café”")
            .encode("cp1252"),
            "text",
            "“Café”",
        ),
        HostileFile("utf16-bom.html", page.format(meta="").encode("utf-16"), "text", "brûlée"),
        HostileFile(
            "lying-utf16-meta.html",
            page.format(meta='<meta charset="utf-16">').encode(),
            "text",
            "brûlée",
        ),
    ]


def _deep_markdown() -> list[HostileFile]:
    indented = "".join("  " * i + "- item\n" for i in range(LADDER))
    quoted = "".join("> " * i + "quote\n" for i in range(LADDER))
    return [
        HostileFile("deep-quotes.md", ("> " * DEEP + "deep quote").encode(), "text", "deep"),
        HostileFile("deep-list.md", ("- " * DEEP + "deep item").encode(), "text", "deep"),
        HostileFile("deep-ordered.md", ("1. " * DEEP + "deep item").encode(), "text", "deep"),
        HostileFile("indented-lists.md", indented.encode(), "text", "item"),
        HostileFile("quote-ladder.md", quoted.encode(), "text", "quote"),
        HostileFile("emphasis.md", ("*" * DEEP + "x" + "*" * DEEP).encode(), "text", "x"),
        HostileFile("brackets.md", ("[" * DEEP + "x" + "](u)" * DEEP).encode(), "text", "x"),
        HostileFile("html-in.md", ("<div>" * DEEP + "x").encode(), "text", "x"),
        HostileFile(
            "deep.html",
            ("<html><body>" + "<div>" * DEEP + "<p>Deep text.</p>" + "</div>" * DEEP).encode(),
            "either",
        ),
    ]


def _empty_and_garbage() -> list[HostileFile]:
    rng = random.Random(5)
    garbage = bytes(rng.randrange(256) for _ in range(4096))
    return [
        *(HostileFile(f"empty.{s}", b"", "error", "empty") for s in ("txt", "md", "html")),
        *(HostileFile(f"empty.{s}", b"", "error", "empty") for s in ("pdf", "docx")),
        HostileFile("blank.md", b" \n\t\r\n  ", "error", "empty"),
        HostileFile("punctuation.txt", b"--- *** ---\n", "error", "no text"),
        HostileFile("garbage.txt", garbage, "error", "not UTF-8"),
        HostileFile("garbage.pdf", garbage, "error", "not a readable PDF"),
        HostileFile("garbage.docx", garbage, "error", "not a readable docx"),
        HostileFile("garbage.html", garbage, "error", "not UTF-8"),
        HostileFile("png.txt", b"\x89PNG\r\n\x1a\n" + garbage, "error", "not UTF-8"),
        HostileFile("pdf-named.txt", PDF, "error", "not UTF-8"),
        HostileFile("docx-named.md", DOCX, "error"),
        HostileFile("zeros.html", bytes(512), "error", "NUL"),
        HostileFile("empty.csv", b"", "error", "empty"),
        HostileFile("garbage.csv", garbage, "error", "not UTF-8"),
        HostileFile("zeros.csv", bytes(512), "error", "NUL"),
        HostileFile("only-commas.csv", b",,,\n;;;\n", "error", "no text"),
        # An unclosed quote swallows the rest of the file into one cell, past the csv module's
        # field limit (128 KiB).
        HostileFile("unclosed.csv", b'a,b\n"' + b"x," * 100_000, "error", "not a readable table"),
    ]


@cache
def hostile_files() -> tuple[HostileFile, ...]:
    """The whole corpus (about a hundred files, 2 MB), in a fixed order; made once a run."""
    bomb = docx_bomb()
    return (
        *_truncated("truncated.pdf", PDF, "either"),
        *_truncated("truncated.docx", DOCX, "error"),
        *_truncated("truncated.html", HTML, "either"),
        *_flipped("flipped.pdf", PDF, seed=1),
        *_flipped("flipped.docx", DOCX, seed=2),
        *_flipped("flipped.html", HTML, seed=3),
        HostileFile("bomb.docx", bomb, "error", "zip bomb"),
        HostileFile("lying-bomb.docx", lying_bomb(bomb, False), "error", "not a readable docx"),
        HostileFile("crc-bomb.docx", lying_bomb(bomb, True), "error", "not a readable docx"),
        HostileFile("billion-laughs.docx", _billion_laughs_docx(), "either"),
        *_xlsx_cases(bomb),
        *_encodings(),
        *_deep_markdown(),
        *_empty_and_garbage(),
    )


# Good files, each with a word no hostile file holds (damaged copies of the files above may
# still be read), to find it by.
GOOD_WORDS = {
    "lighthouse.txt": "lighthouses",
    "bees.md": "honeybees",
    "glacier.html": "moraines",
    "turbine.pdf": "anemometer",
    "expenses.docx": "per-diem",
    "tides.csv": "spring tide",
    "budget.xlsx": "dredging",
}
GOOD_FILES = {
    "lighthouse.txt": b"Lighthouses guide ships along dangerous coasts with rotating beams.\n",
    "bees.md": b"# Bees\n\nHoneybees turn flower nectar into honey inside wax combs.\n",
    "glacier.html": html_of(
        "Glaciers", "Glaciers leave moraines of rock and gravel where their ice melts back."
    ),
    "turbine.pdf": pdf_of("Wind Turbines", "The anemometer on the nacelle measures wind speed."),
    "expenses.docx": docx_of("Expenses", "The per-diem rate covers meals and local transport."),
    "tides.csv": b"Port,Spring tide (m)\nBergen,1.8\n",
    "budget.xlsx": xlsx_of("Budget", ("Item", "Cost (NOK)"), ("Harbour dredging", 250_000)),
}
