"""What a question asks for: its parts, the kind of answer it expects, its specific terms."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragserve.rag.question import (
    answer_kind_match,
    expected_answer,
    missing_share,
    question_parts,
    row_match,
    row_named,
    specific_kind,
)

PRICE_ROW = "Item: Gateway SG-2 | Unit price (NOK): 7 500 | Lead time: 5 weeks"


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        (
            "Which trains may I book in first class, and who approves a sleeper?",
            ["Which trains may I book in first class", "who approves a sleeper?"],
        ),
        (
            "How much did marketing request and how much did they receive?",
            ["How much did marketing request", "how much did they receive?"],
        ),
        ("When does it open? And who runs it?", ["When does it open?", "And who runs it?"]),
        ("Why was the move delayed, and to when?", ["Why was the move delayed", "to when?"]),
        (
            "How soon must I answer a page, and after how long is the backup paged?",
            ["How soon must I answer a page", "after how long is the backup paged?"],
        ),
        # "and" joining nouns, or opening a clause inside one question, does not split.
        ("What are the per diem and the hotel cap for Spain?", None),
        ("How tides formed and what roles they play is studied by which field?", None),
    ],
)
def test_a_question_is_split_where_it_asks_a_second_thing(question, parts):
    assert question_parts(question) == (parts or [question])


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("Which app do I open when signing in?", None),
        ("If the van breaks down, who do I call?", "person"),
        ("When is the audit?", "time"),
        ("What's the deadline for the survey?", "time"),
        ("How many desks are on the third floor?", "quantity"),
        ("What was the NPS score in May?", "quantity"),
        ("How tight should the bolt be?", "quantity"),
        ("What do I get per km when I cycle?", "quantity"),
        ("What do I pay for a new badge?", "quantity"),
        ("How do I reset the router?", None),
        # The noun asked about says it: a measure wants a number, a date a time. Not a role:
        # "Which king ...?" is answered by "Mithridates I", a name no pattern tells apart.
        ("What was the measured monthly uptime of the region?", "quantity"),
        ("At what elevation is the village?", "quantity"),
        ("Which firmware version fixed the pairing bug?", "quantity"),
        ("Which Parthian king took Media?", None),
        ("What is the earliest date the price could change?", "time"),
        # Of two nouns, the nearer: the date of a price change is a date.
        ("What was the date of the price change?", "time"),
        ("Which employees can't get paid for overtime?", None),
        ("What counts as downtime?", None),
        # A second part or a follow-up read before the earlier question: its own question
        # word says what it asks for; one that only hands on ("How about ...?") does not.
        ("which bin does it go in? How often is paper collected?", None),
        ("How about September? How many tickets were there in July?", "quantity"),
        ("And in May? Who chaired the meeting in April?", "person"),
    ],
)
def test_the_expected_kind_is_the_question_words_not_a_clause(question, kind):
    assert expected_answer(question) == kind


def test_a_role_or_a_desk_answers_who():
    question = "Who signs off on a company car?"
    assert answer_kind_match(question, "A company car needs approval from the COO.") == 1.0
    assert answer_kind_match(question, "Ask your line manager before ordering one.") == 1.0
    assert answer_kind_match(question, "Company cars are leased for three years.") == 0.0


def test_a_number_in_words_answers_how_many():
    question = "How long is the notice period?"
    assert answer_kind_match(question, "The notice period is three months.") == 1.0
    assert answer_kind_match(question, "Notice must be given in writing.") == 0.0


def test_an_acronym_is_found_spelled_out():
    assert missing_share("What is the hotel cap in the UK?", "Country: United Kingdom") == 0.0
    assert missing_share("What is the hotel cap in the UK?", "Country: Sweden") == 1.0


@pytest.mark.parametrize(
    ("term", "kind"),
    [
        ("September", "time"),
        ("2025", "number"),
        ("VM-40", "code"),
        ("CSAT", "acronym"),
        ("Finland", "name"),
    ],
)
def test_specific_terms_have_kinds(term, kind):
    assert specific_kind(term) == kind


WORDS = ["and", "but", "who", "what", "how", "did", "is", "the", "fee", ",", "?", " ", "  "]


@given(st.lists(st.sampled_from(WORDS), max_size=30).map(" ".join))
@settings(max_examples=300, deadline=None)
def test_parts_are_the_question_in_order_whatever_it_says(question):
    parts = question_parts(question)
    position = 0
    for part in parts:
        assert part and part == part.strip()
        found = question.find(part, position)
        assert found >= 0, (question, parts)
        position = found + len(part)
    if question.strip():
        assert parts


@pytest.mark.parametrize(
    ("question", "sentence", "expected"),
    [
        # The row's entity and the column asked for, each in the question's own words.
        ("What is the lead time for the SG-2 gateway?", PRICE_ROW, 1.0),
        ("What does one Gateway SG-2 cost at unit price, in NOK?", PRICE_ROW, 1.0),
        # Another entity's row: the column alone is not enough.
        ("What is the lead time for the VM-40 sensor?", PRICE_ROW, 0.0),
        # The entity alone is not enough either; nor is a sentence that is no row.
        ("Who supplies the SG-2 gateway?", PRICE_ROW, 0.0),
        ("What is the lead time for the SG-2 gateway?", "The SG-2 lead time is 5 weeks.", 0.0),
        ("What is the lead time for the SG-2 gateway?", "Gateway SG-2 | 7500 | 5 weeks", 0.0),
    ],
)
def test_a_row_matches_when_the_question_names_its_entity_and_column(question, sentence, expected):
    assert row_match(question, sentence) == expected


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("Plan: Business | Monthly price (GBP): 499", 1.0),
        ("Plan: Team | Monthly price (GBP): 149", 0.0),
        ("Add-on: Log retention | Available on: Business", 0.0),  # a row that only lists it
        ("The Business plan costs 499 GBP a month.", 0.0),  # not a row
    ],
)
def test_a_row_is_named_when_the_question_names_its_key(sentence, expected):
    assert row_named("What does the Business plan cost per month?", sentence) == expected


def test_a_plural_term_is_found_in_the_singular_as_a_word():
    question = "When is the recycling station open on Saturdays?"
    assert missing_share(question, "It is open Saturday 09:00-15:00.") == 0.0
    assert missing_share(question, "It is open Monday to Thursday.") == 1.0
    assert missing_share("How much is a hotel in Paris?", "Comparing hotels.") == 1.0


def test_the_askers_situation_is_not_what_the_evidence_must_name():
    leave = "Partners may take 4 weeks of partner leave at full pay."
    situated = "My wife is due in June. How much partner leave do I get?"
    assert missing_share(situated, leave) == 0.0
    # Asked about, June must be named.
    assert missing_share("How much partner leave do I get in June?", leave) == 1.0
    # A question without a question mark is asked as a whole.
    assert missing_share("partner leave in June", leave) == 1.0


def test_names_beyond_ascii_are_names():
    # Capitals were A-Z only: "Ålesund" was no name the evidence must hold, and "Øystein
    # Ødegård" no person answering "who".
    question = "Who chaired the steering meeting in Ålesund?"
    assert missing_share(question, "The steering group met in Bergen.") == 1.0
    assert missing_share(question, "The steering group met in Ålesund.") == 0.0
    assert answer_kind_match(question, "The meeting was chaired by Øystein Ødegård.") == 1.0
    assert answer_kind_match(question, "The meeting was chaired by nobody in particular.") == 0.0
    assert specific_kind("Ålesund") == "name" and specific_kind("ÆØÅ") == "acronym"
