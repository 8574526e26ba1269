"""Answers on an organisation's own documents: tables, FAQs, meeting notes, two-part and
follow-up questions, units and negations, and refusals that say why."""

import asyncio
from dataclasses import replace

import pytest

from ragserve.engine.client import FixedModel
from ragserve.rag.answer import AnswerService, AnswerSettings
from ragserve.rag.answer_result import REFUSALS, AnswerResult
from ragserve.rag.answerability import Answerability
from ragserve.rag.documents import AccessFilter, Acl
from ragserve.rag.evidence import EvidenceSelector
from ragserve.rag.ingest import Ingestor, SourceDocument
from ragserve.rag.prompt import PromptBuilder
from ragserve.rag.retrieval import RetrievalSettings, Retriever
from ragserve.rag.stores.sqlite import SqliteStore
from tests.rag.test_answer import replying

HANDBOOK = """# Staff handbook

## Annual leave

Every employee gets 25 days of annual leave per calendar year. Up to 5 unused days can be
carried over to the next year, and carried-over days must be taken by 31 March.

## Relocation

The relocation allowance is 1,800 NOK per month for the first six months. Contractors are not
eligible for the relocation allowance.
"""
REPORT = """# Support report, third quarter

Ticket volume rose in August after the firmware release.

| Month | Tickets | CSAT |
|---|---|---|
| July | 980 | 4.4 |
| August | 1,204 | 4.6 |
| September | 1,100 | 4.5 |
"""
FAQ = """Travel FAQ

What is the per diem for domestic travel?
The daily meal allowance for domestic travel is 450 NOK.

Can I fly business class?
Business class always needs written approval from the finance director.
"""
NOTES = """Harbour project - steering group meeting notes

Date: 3 March 2025, 09:00-10:30
Chair: Ingrid Solberg
Minutes: Ola Berg

Decisions
The group approved the tender documents for the new quay.

Action items
Ola Berg - book the site visit with the contractor - 14 March
Ingrid Solberg - circulate the revised budget to the board - 10 March
"""
DEPOT = """Depot expansion - project notes

The depot team had asked for 4.2 million NOK for the expansion.
Decision: the depot budget is set at 3.6 million NOK.
Decision: a night shift at the depot starts on 5 May 2025.
Recruitment of six forklift drivers and one foreman is approved.
"""
PRICES = """Item;Unit price (NOK);In stock
Vibration sensor VM-40;4 900;120
Gateway SG-2;7 500;35
Mounting kit;350;410
"""
HARDWARE = (
    "Hardware options. Builds run on shared machines in the workspace's region unless the team "
    "books its own. Logs are kept for 30 days and artefacts for 7 days. A dedicated runner has "
    "4 vCPU and 16 GB of memory and is billed at 240 GBP. Machines are patched every Sunday "
    "night and restarted in turn."
)
RELEASES = """# Lumen release notes

## Lumen 3.2 — released 2 May 2025
- Reports can now be exported to Excel.
- Single sign-on works with Okta.

## Lumen 3.1 — released 14 February 2025
- The dashboard has a dark mode.

## After six months
- Have a performance review with your team lead.
"""
RECIPE = """# Fish soup

Serves 4. The soup must not boil once the fish is in.

## Ingredients

- 600 g cod fillet
- 1 litre fish stock
- 2 dl cream

## Method

1. Simmer the stock for 5 minutes.
2. Add the fish and poach it for 4 minutes.
"""
BOARD = "The board approved a retention bonus of 9,000 NOK for the harbour project managers."

STAFF = AccessFilter("acme", "sue", ("staff",))
STRANGER = AccessFilter("globex", "bob", ("staff",))


@pytest.fixture(scope="module")
def documents(embedder, tmp_path_factory):
    store = SqliteStore(tmp_path_factory.mktemp("answers") / "index.sqlite", embedder.dimension)
    ingestor = Ingestor(store, embedder)
    staff = Acl.of(groups=["staff"])
    for name, text, acl in (
        ("handbook.md", HANDBOOK, staff),
        ("report.md", REPORT, staff),
        ("faq.txt", FAQ, staff),
        ("notes.txt", NOTES, staff),
        ("depot.txt", DEPOT, staff),
        ("price-list.csv", PRICES, staff),
        ("releases.md", RELEASES, staff),
        ("recipe.md", RECIPE, staff),
        ("board.txt", BOARD, Acl.of(groups=["board"])),
    ):
        assert ingestor.ingest(SourceDocument(name, text.encode()), "acme", "root", acl).ok
    yield store
    store.close()


@pytest.fixture(scope="module")
def answers(documents, embedder, reader, llm_fp32) -> AnswerService:
    return AnswerService(
        Retriever(documents, embedder, RetrievalSettings()),
        EvidenceSelector(reader),
        Answerability.load(),
        PromptBuilder(FixedModel(llm_fp32.get_tokenizer(), 2048), 48, 1200),
        AnswerSettings(style="quote"),
    )


def ask(answers: AnswerService, question: str, generate=None, **options) -> AnswerResult:
    async def go():
        events = [e async for e in answers.answer(STAFF, question, generate, **options)]
        assert len(events) == 1, "one event: the checked answer, never a draft before it"
        return events[0].result

    return asyncio.run(go())


def quoted_sources(result: AnswerResult, store) -> set[str]:
    return {store.get_document(STAFF, c.doc_id).source for c in result.citations}


def always_answering(answers: AnswerService) -> AnswerService:
    """The same path with answerability that never refuses: for tests of what is chosen."""
    never = replace(answers.answerability, refuse_below=0.0, quote_above=0.0)
    return AnswerService(
        answers.retriever, answers.selector, never, answers.builder, answers.settings
    )


def test_a_table_row_with_its_headers_is_the_answer(answers):
    result = ask(always_answering(answers), "What was the CSAT score in August?")
    assert result.mode == "extractive", result
    assert "Month: August | Tickets: 1,204 | CSAT: 4.6" in result.answer


def test_a_spreadsheet_row_is_the_answer(answers, documents):
    result = ask(answers, "What is the unit price of the SG-2 gateway?")
    assert result.mode == "extractive", result
    assert "Item: Gateway SG-2 | Unit price (NOK): 7 500 | In stock: 35" in result.answer
    assert quoted_sources(result, documents) == {"price-list.csv"}


def test_an_faq_answer_is_quoted_not_its_question(answers):
    # Asked in the FAQ's own words, whose answer shares few of them ("daily meal allowance").
    result = ask(answers, "What is the per diem for domestic travel?")
    assert "450 NOK" in result.answer, result
    assert "What is the per diem" not in result.answer


def test_a_two_part_question_gets_both_facts_and_no_headings(answers):
    question = "Who chaired the harbour steering meeting, and what is that person's action item?"
    result = ask(answers, question)
    assert "Ingrid Solberg" in result.answer and "revised budget" in result.answer, result
    assert "meeting notes" not in result.answer
    assert len(result.citations) >= 2
    assert not {"Action items", "Decisions"} & {c.quote for c in result.citations}


def test_a_quote_comes_after_the_heading_that_completes_it(answers):
    # The release, or the time, is only in the heading above the line that answers.
    result = ask(always_answering(answers), "In which release can reports be exported to Excel?")
    assert "Lumen 3.2 — released 2 May 2025: Reports can now be exported" in result.answer
    assert result.citations[0].quote == "- Reports can now be exported to Excel."
    result = ask(always_answering(answers), "When do I have the performance review?")
    assert "After six months: Have a performance review" in result.answer, result


def test_a_follow_up_is_read_with_the_earlier_question(answers):
    result = ask(
        answers,
        "And how many of them can I carry over?",
        history=["How many days of annual leave do I get?"],
    )
    assert "5 unused days" in result.answer, result
    assert "annual leave" in result.query


def test_each_part_of_a_two_part_question_gets_its_own_sentence(answers):
    question = "How much did the depot team ask for and how much did they get?"
    result = ask(always_answering(answers), question)
    assert "4.2 million NOK" in result.answer and "3.6 million NOK" in result.answer, result


def test_a_follow_up_is_not_answered_with_the_earlier_answer_alone(answers):
    # The earlier question's sentence is also the follow-up's best match (it names the
    # shift); the follow-up's own words find the sentence that answers it.
    result = ask(
        always_answering(answers),
        "How many people are they hiring for it?",
        history=["When does the night shift at the depot start?"],
    )
    assert "six forklift drivers" in result.answer, result


def test_a_follow_up_never_brings_back_what_the_reader_cannot_read(answers, documents):
    result = ask(
        answers,
        "And who gets it?",
        history=["What bonus did the board approve for the harbour project?"],
    )
    shown = [*result.citations, *result.related]
    assert all(documents.get_document(STAFF, c.doc_id) is not None for c in shown)
    assert "9,000" not in result.answer and all("9,000" not in c.quote for c in shown)


def test_refusals_say_whether_anything_matched(answers):
    nothing = ask(answers, "Which opera did Puccini compose in 1900?")
    assert nothing.refusal == "no_match" and nothing.answer == REFUSALS["no_match"]
    assert nothing.related == []
    unstated = ask(answers, "How many parking spaces does the harbour office have?")
    assert unstated.refusal == "not_stated", unstated
    assert unstated.answer == REFUSALS["not_stated"] and unstated.related
    assert all(c.support == 0.0 for c in unstated.related)


@pytest.mark.parametrize(
    "question", ["What is the relocation allowance?", "Which month had the most tickets?"]
)
def test_a_reader_of_another_tenant_hears_nothing_matched(answers, question):
    async def go():
        return [e async for e in answers.answer(STRANGER, question, None)]

    (event,) = asyncio.run(go())
    assert event.result.refusal == "no_match" and event.result.related == []


@pytest.mark.parametrize(
    ("question", "row"),
    [
        ("Which month had the most tickets?", "Month: August | Tickets: 1,204 | CSAT: 4.6"),
        ("In which month was the CSAT lowest?", "Month: July | Tickets: 980 | CSAT: 4.4"),
    ],
)
def test_a_superlative_over_a_table_is_the_row_that_holds_it(answers, question, row):
    result = ask(answers, question)
    assert result.mode == "extractive" and result.answer == f"{row} [1]", result
    assert result.citations[0].quote == row


@pytest.mark.parametrize(
    "reply",
    [
        "The relocation allowance is 1,800 Euros per month [1].",
        "Contractors are eligible for the relocation allowance [1].",
    ],
)
def test_a_reply_with_another_unit_or_polarity_never_passes_the_check(answers, reply):
    prompts: list[str] = []
    tokenizer = answers.builder.tokenizer
    question = "What is the relocation allowance, and can contractors get it?"
    result = ask(answers, question, replying(reply, prompts, tokenizer), style="generate")
    assert prompts, "generate style calls the model"
    assert result.mode != "generated", result
    assert "Euros" not in result.answer and "are eligible" not in result.answer


@pytest.mark.parametrize(
    ("reply", "shown"),
    [
        ("The relocation allowance is 1,800 NOK per month [1].", None),
        # Words about the answer that state nothing are not shown.
        ("The answer is: 1,800 NOK per month [1].", "1,800 NOK per month [1]."),
    ],
)
def test_a_reply_that_states_what_the_source_says_is_kept(answers, reply, shown):
    prompts: list[str] = []
    result = ask(
        answers,
        "What is the relocation allowance?",
        replying(reply, prompts, answers.builder.tokenizer),
        style="generate",
    )
    assert result.mode == "generated" and result.answer == (shown or reply), result


def test_the_style_is_chosen_per_request(answers):
    prompts: list[str] = []
    generate = replying("x", prompts, answers.builder.tokenizer)
    quoted = ask(answers, "What is the relocation allowance?", generate, style="quote")
    assert prompts == [] and quoted.mode == "extractive"
    automatic = ask(answers, "What is the relocation allowance?", generate, style="auto")
    # auto calls the model exactly when several sentences must be combined (the reply "x"
    # fails the check, so the answer is the quote of those sentences).
    assert bool(prompts) == (len(automatic.citations) > 1), automatic


def test_a_follow_up_naming_something_new_gets_a_sentence_that_names_it(
    embedder, answers, tmp_path
):
    # "How much is an extra seat per month?" then "And a dedicated runner?": read with the
    # earlier question, the seat's sentences rank first; the answer must bring the sentence
    # that names the runner, from a chunk the query alone would not retrieve.
    store = SqliteStore(tmp_path / "index.sqlite", embedder.dimension)
    ingestor = Ingestor(store, embedder)
    for name, text in (
        (
            "seats.txt",
            "An extra seat costs 12 GBP per month. An extra seat is paid for each month. "
            "Each extra seat is a named user.",
        ),
        ("seat-policy.txt", "Each extra seat is billed per month from the day it is added."),
        ("hardware.txt", HARDWARE),
    ):
        document = SourceDocument(name, text.encode())
        assert ingestor.ingest(document, "acme", "root", Acl.of(groups=["staff"])).ok
    service = AnswerService(
        Retriever(store, embedder, RetrievalSettings(top_k=1)),
        answers.selector,
        replace(answers.answerability, refuse_below=0.0, quote_above=0.0),
        answers.builder,
        AnswerSettings(style="quote", top_k=1),
    )
    history = ["How much is an extra seat per month?"]
    result = ask(service, "And a dedicated runner?", history=history)
    assert "12 GBP" in result.answer and "billed at 240 GBP" in result.answer, result
    store.close()


def test_a_list_named_by_its_heading_is_quoted_whole(answers):
    result = ask(answers, "What ingredients go into the fish soup?")
    assert [c.quote for c in result.citations] == [
        "- 600 g cod fillet",
        "- 1 litre fish stock",
        "- 2 dl cream",
    ]
    assert result.answer.startswith("Ingredients: 600 g cod fillet [1] 1 litre fish stock [2]")
    # auto quotes a list too: its items need no combining.
    prompts: list[str] = []
    generate = replying("x", prompts, answers.builder.tokenizer)
    automatic = ask(answers, "What ingredients go into the fish soup?", generate, style="auto")
    assert prompts == [] and automatic.answer == result.answer
