"""Sentences of the kinds of text people index: table rows, code in a README, quoted email."""

from ragserve.rag.sentences import as_prose, sentence_spans


def sentences(text: str) -> list[str]:
    spans = sentence_spans(text)
    for sentence, start, end in spans:
        assert text[start:end] == sentence
    return [sentence for sentence, _, _ in spans]


def test_a_row_line_is_one_sentence_whatever_its_cells_hold():
    rows = (
        "Parameter: Supply voltage | Value: 10 ... 30 | Unit: V DC\n"
        "Plan: Pro | Price: EUR 9.99 a month. Billed yearly. | Seats: 5\n"
        "It rained. Then it stopped.\n"
    )
    assert sentences(rows) == [
        "Parameter: Supply voltage | Value: 10 ... 30 | Unit: V DC",
        "Plan: Pro | Price: EUR 9.99 a month. Billed yearly. | Seats: 5",
        "It rained.",
        "Then it stopped.",
    ]


def test_the_fences_of_code_are_no_sentences_and_part_sentences():
    readme = (
        "Install it first.\n\n"
        "```sh\n"
        "brew install strata\n"
        "```\n"
        "reads the password from the\n"
        "environment.\n\n"
        "~~~\n"
        "strata init --repo /mnt/nas\n"
    )
    assert sentences(readme) == [
        "Install it first.",
        "brew install strata",
        "reads the password from the\nenvironment.",
        "strata init --repo /mnt/nas",
    ]
    # A chunk that starts inside the first block reads its closing fence as an opening one.
    assert sentences(readme[readme.index("brew") :]) == sentences(readme)[1:]


def test_a_quoted_sentence_wrapped_over_lines_is_whole_without_its_marks():
    thread = (
        "One change to the plan below.\n\n"
        "> Thanks Tom, agreed. IT disconnection will be at 12:00 on Thursday 27 March\n"
        "> instead of 15:00.\n"
        ">\n"
        ">> Swift Relocations will move everything on the Friday, so the move itself\n"
        ">> takes place on Friday 28 March.\n"
    )
    found = sentences(thread)
    assert found[:2] == ["One change to the plan below.", "Thanks Tom, agreed."]
    assert [as_prose(s) for s in found[2:]] == [
        "IT disconnection will be at 12:00 on Thursday 27 March instead of 15:00.",
        "Swift Relocations will move everything on the Friday, so the move itself takes place "
        "on Friday 28 March.",
    ]


def test_leader_dots_before_a_value_end_no_sentence():
    schedule = (
        "SCHEDULE OF LIMITS\n"
        "  Single article limit ...... GBP 1,500\n"
        "  Escape of water excess .... GBP 350\n"
        "It was... fine. Wait.... Then go.\n"
    )
    assert sentences(schedule) == [
        "SCHEDULE OF LIMITS",
        "Single article limit ...... GBP 1,500",
        "Escape of water excess .... GBP 350",
        # An ellipsis ends its word.
        "It was...",
        "fine.",
        "Wait....",
        "Then go.",
    ]


def test_a_line_wrapped_mid_sentence_goes_on_and_a_line_of_its_own_does_not():
    notes = (
        "One change to the plan below. Swift Relocations have told us they cannot do\n"
        "Friday 28 March after all, so the move itself will now take place on\n"
        "Saturday 29 March.\n"
        "Place: Trondheim head office, meeting room Nidelva, and Microsoft Teams\n"
        "Chair: Kari Nygaard\n"
        "Lars Eide — finalise the certification plan for the VM-40 Gen 2 — 1 November\n"
        "Erik Dahl — inform the pilot customers about the new launch date\n"
    )
    assert sentences(notes) == [
        "One change to the plan below.",
        "Swift Relocations have told us they cannot do\nFriday 28 March after all, so the move "
        "itself will now take place on\nSaturday 29 March.",
        # Lines that start with what they say end where they end.
        "Place: Trondheim head office, meeting room Nidelva, and Microsoft Teams",
        "Chair: Kari Nygaard",
        "Lars Eide — finalise the certification plan for the VM-40 Gen 2 — 1 November",
        "Erik Dahl — inform the pilot customers about the new launch date",
    ]


def test_a_numbered_heading_is_one_sentence_in_markdown_too():
    handbook = "## 2. Remote work\n\nMost roles may work from home up to 2 days a week.\n"
    assert sentences(handbook) == [
        "## 2. Remote work",
        "Most roles may work from home up to 2 days a week.",
    ]
