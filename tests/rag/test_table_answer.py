"""Superlatives over a table's rows: the row with the most or least in the column asked."""

from dataclasses import replace

import pytest

from ragserve.rag.documents import ScoredChunk
from ragserve.rag.table_answer import asks_for_extreme, superlative_row

REPORT = """Support report, third quarter 2024

Month: July | Tickets: 1,184 | Median first response (h): 3.2 | CSAT: 4.4
Month: August | Tickets: 1,395 | Median first response (h): 5.9 | CSAT: 3.9
Month: September | Tickets: 1,256 | Median first response (h): 3.0 | CSAT: 4.6
Month: Total | Tickets: 3,835
Ticket volume rose in August after the firmware release."""


def chunks_of(text: str, size: int = 90, overlap: int = 20, doc_id: str = "report") -> list:
    """The text cut in overlapping chunks, as a store returns a document's chunks."""
    chunks, start = [], 0
    while start < len(text):
        end = min(start + size, len(text))
        chunks.append(
            ScoredChunk(
                f"{doc_id}-{start}",
                doc_id,
                "Support report",
                "report.pdf",
                len(chunks),
                start,
                end,
                text[start:end],
                0.0,
            )
        )
        start = end if end == len(text) else end - overlap
    return chunks


@pytest.mark.parametrize(
    ("question", "month"),
    [
        ("Which month had the most tickets?", "August"),
        ("In which month were the fewest tickets handled?", "July"),
        ("Which month had the highest CSAT?", "September"),
        ("Which month had the longest median first response?", "August"),
        ("When were the most tickets handled?", "August"),  # "when" asks for a month
    ],
)
def test_the_row_with_the_extreme_value_answers(question, month):
    row = superlative_row(question, [chunks_of(REPORT)])
    assert row is not None and row.text.startswith(f"Month: {month} |")
    # Its span is the row's in the document, whichever chunks the row was cut across.
    assert REPORT[row.start : row.end] == row.text
    assert row.chunk.start <= row.start and row.end <= row.chunk.end


@pytest.mark.parametrize(
    "question",
    [
        "How many tickets were there in August?",  # no superlative
        "Which month had the most tickets in 2023?",  # a year the report lacks
        "What were the most tickets in August?",  # names a row: a look-up, not a comparison
        "What is the highest ticket volume?",  # does not ask which month
        "Which month had the most and the least tickets?",  # both directions
        "Which month had the highest score?",  # names no column
    ],
)
def test_other_questions_are_left_to_the_sentences(question):
    assert superlative_row(question, [chunks_of(REPORT)]) is None


def test_a_tie_or_a_column_that_is_not_all_numbers_is_not_compared():
    tied = "Month: May | Tickets: 10\nMonth: June | Tickets: 10\nMonth: July | Tickets: 8"
    assert superlative_row("Which month had the most tickets?", [chunks_of(tied)]) is None
    words = "Month: May | Tickets: ten\nMonth: June | Tickets: 12"
    assert superlative_row("Which month had the most tickets?", [chunks_of(words)]) is None


def test_thousands_and_decimals_are_read_as_written():
    prices = "Plan: Team | Price: 1,200\nPlan: Pro | Price: 990.5\nPlan: Free | Price: 0"
    row = superlative_row("Which plan has the highest price?", [chunks_of(prices)])
    assert row is not None and row.text.startswith("Plan: Team")
    spaced = "Item: Sensor | Unit price (NOK): 4 900\nItem: Gateway | Unit price (NOK): 7 500"
    row = superlative_row("Which item has the lowest unit price?", [chunks_of(spaced)])
    assert row is not None and row.text.startswith("Item: Sensor")


def test_asking_for_an_extreme():
    assert asks_for_extreme("Which month was the busiest?")
    assert not asks_for_extreme("Which month was it?")


def test_a_row_ends_at_its_line_where_the_next_chunk_starts_after_a_gap():
    table = "Country: Sweden | Per diem: 62\nCountry: Norway | Per diem: 80"
    text = f"{table}\n\nWhat if meals are provided?"
    first = chunks_of(table)[0]
    second = chunks_of(text[len(table) + 2 :])[0]
    second = replace(second, chunk_id="next", start=len(table) + 2, end=len(text))
    row = superlative_row("Which country has the highest per diem?", [[first, second]])
    assert row is not None and row.text == "Country: Norway | Per diem: 80"


def test_a_column_is_named_without_its_unit():
    caps = (
        "Country: Estonia | Hotel cap (EUR per night): 110\n"
        "Country: Norway | Hotel cap (EUR per night): 200"
    )
    row = superlative_row("Which country has the cheapest hotel cap?", [chunks_of(caps)])
    assert row is not None and row.text.startswith("Country: Estonia")


def test_who_asks_for_a_key_column_of_names():
    agents = "Agent: Kari Nygaard | Tickets closed: 310\nAgent: Lars Eide | Tickets closed: 280"
    row = superlative_row("Who closed the most tickets?", [chunks_of(agents)])
    assert row is not None and row.text.startswith("Agent: Kari Nygaard")


def test_a_key_column_is_asked_for_by_most_of_its_label():
    parts = (
        "Part number: HX-100 | Description: Pump impeller | Stock: 14\n"
        "Part number: HX-315 | Description: Motor bearing | Stock: 120"
    )
    row = superlative_row("Which part has the most stock?", [chunks_of(parts)])
    assert row is not None and row.text.startswith("Part number: HX-315")
