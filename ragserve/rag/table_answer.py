"""Superlatives over a table: "Which month had the most tickets?" answered by the row that
holds the most, found by comparing every row's number, not by how close a row reads.

Sentence ranking cannot answer such a question: every row of the table reads about as close
to it, and the top row may not even be among the retrieved chunks. So when a question asks
for the most or the least of something (most, highest, fewest, lowest, ...), asks for a
table's key column ("which month", or "when" of a column of months) and names exactly one
other column whose cells are all numbers ("tickets"), the row with the largest or smallest
number in that column is the answer, quoted and cited like any evidence sentence. Rows come
from every chunk the reader may read of the documents retrieval found, in the version it
found. The question must name nothing the document lacks (the most tickets "in 2023" of a
2024 report is not answered), and a tie or a second column named leaves the question to the
sentence path.
"""

import re
from collections.abc import Sequence
from dataclasses import replace

from ragserve.rag.documents import ScoredChunk, document_text
from ragserve.rag.evidence import Sentence
from ragserve.rag.parsers.tables import row_cells
from ragserve.rag.question import answer_kind_match, expected_answer, missing_share, mostly_in
from ragserve.rag.text import stems

MOST = re.compile(
    r"\b(most|highest|largest|biggest|greatest|maximum|busiest|longest|peak)\b", re.IGNORECASE
)
LEAST = re.compile(r"\b(least|lowest|smallest|fewest|minimum|shortest|cheapest)\b", re.IGNORECASE)
# A column label's unit, which a question seldom names: "Hotel cap (EUR per night)".
UNIT = re.compile(r"\([^)]*\)")
# A row that sums or averages the others is not one of them.
SUMMARY_ROW = re.compile(r"^(total|sum|overall|average|mean|median)\b", re.IGNORECASE)
# A cell that is a number, perhaps after a currency sign and before a unit: "1,204", "7 500",
# "€ 70", "4.6", "12 %". A comma before three digits groups thousands; otherwise it is decimal.
NUMERIC_CELL = re.compile(r"^\D{0,3}?(-?\d{1,3}(?:[ ,]\d{3})+(?!\d)|-?\d+(?:[.,]\d+)?)")


def asks_for_extreme(question: str) -> bool:
    """Whether the question asks for the most or the least of something (not both)."""
    return bool(MOST.search(question)) != bool(LEAST.search(question))


def superlative_row(question: str, documents: Sequence[list[ScoredChunk]]) -> Sentence | None:
    """The row that answers a question for the most or least of a table's column, or None
    when the question asks for no such thing or no single table and column fit it."""
    if not asks_for_extreme(question):
        return None
    largest = bool(MOST.search(question))
    asked = stems(question)
    found = []
    for chunks in documents:
        version = max((c.version for c in chunks), default=0)
        holder = [c for c in chunks if c.version == version]
        title = holder[0].title if holder else ""
        text = document_text(holder)
        if " | " not in text or missing_share(question, f"{title} {text}") > 0:
            continue
        for rows in _tables(text):
            found.extend(
                (column, rows, holder, text) for column in _asked_columns(question, asked, rows)
            )
    if len(found) != 1:
        return None
    column, rows, holder, text = found[0]
    values = [(_number(dict(cells)[column]), start, end, line) for start, end, line, cells in rows]
    extreme = max(v for v, *_ in values) if largest else min(v for v, *_ in values)
    best = [(start, end, line) for value, start, end, line in values if value == extreme]
    if len(best) != 1:
        return None
    start, end, line = best[0]
    # The chunk the row starts in, widened to hold the row where the chunk's end cut it.
    chunk = next(c for c in holder if c.start <= start < c.end)
    low, high = chunk.start, max(chunk.end, end)
    chunk = replace(chunk, start=low, end=high, text=text[low:high])
    return Sentence(chunk, line, start, end, score=1.0, similarity=1.0, overlap=1.0)


Row = tuple[int, int, str, list[tuple[str, str]]]


def _tables(text: str) -> list[list[Row]]:
    """Each run of two or more consecutive row lines: a table, each row with its span."""
    tables: list[list[Row]] = [[]]
    position = 0
    for line in text.split("\n"):
        cells = row_cells(line.strip())
        if cells is None:
            tables.append([])
        elif not SUMMARY_ROW.match(cells[0][1]):
            tables[-1].append((position, position + len(line), line, cells))
        position += len(line) + 1
    return [rows for rows in tables if len(rows) >= 2]


def _asked_columns(question: str, asked: set[str], rows: list[Row]) -> list[str]:
    """The table's numeric columns the question names (most words of the label, its unit
    aside), if it also asks for the key column: names most of its label ("which month",
    "which part" of "Part number") or asks for the kind
    of answer every key is ("when" of months, "who" of names). A question that names one
    row's key asks about that row, not the table."""
    key_label, keys = rows[0][3][0][0], [cells[0][1] for *_, cells in rows]
    asks_for_key = mostly_in(stems(key_label), asked) or (
        expected_answer(question) in ("time", "person")
        and all(answer_kind_match(question, key) == 1.0 for key in keys)
    )
    if not asks_for_key or any(stems(key) <= asked for key in keys):
        return []
    labels = {label for *_, cells in rows for label, _ in cells[1:]}
    return [
        label
        for label in sorted(labels)
        if mostly_in(stems(UNIT.sub("", label)), asked)
        and all(_number(dict(cells).get(label, "")) is not None for *_, cells in rows)
    ]


def _number(cell: str) -> float | None:
    match = NUMERIC_CELL.match(cell.strip())
    if match is None:
        return None
    digits = match.group(1).replace(" ", "")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", digits):
        digits = digits.replace(",", "")
    return float(digits.replace(",", "."))
