"""Which heading a place in a document stands under."""

from ragserve.rag.headings import heading_above, heads_section

POLICY = (
    "3. WHAT IS NOT COVERED\n"
    "3.5 Wear and tear.\n"
    "3.6 Mobile phones, laptops and other portable items while away from the\n"
    "    home, because Personal Possessions cover is not included.\n"
)


def test_the_last_heading_above_the_line_is_the_section():
    at = POLICY.index("3.6")
    assert heading_above(POLICY, at, "Home Contents Policy") == "3. WHAT IS NOT COVERED"


def test_a_wrapped_line_above_is_no_heading():
    # A chunk that starts on the wrapped line's second half: its first half, read alone, is a
    # short line without a full stop.
    at = POLICY.index("home, because")
    assert heading_above(POLICY, at, "Home Contents Policy") == "3. WHAT IS NOT COVERED"


def test_a_numbered_step_is_no_heading_and_a_numbered_section_is():
    manual = (
        "Replacing the battery\n"
        "1. Unscrew the cover\n"
        "2. Lift the battery out\n"
        "\n"
        "3. Charging\n"
        "Charge it for 5 hours.\n"
    )
    step = manual.index("2. Lift")
    assert not heads_section(manual, step, step + len("2. Lift the battery out"), "Manual")
    assert heading_above(manual, step, "Manual") == "Replacing the battery"
    assert heading_above(manual, manual.index("Charge it"), "Manual") == "3. Charging"


def test_a_mails_subject_line_heads_its_message_quoted_or_not():
    thread = (
        "Subject: RE: Office move\n"
        "The move is now on Saturday.\n"
        "> Subject: Office move\n"
        "> Key fobs can be collected at reception.\n"
    )
    quoted = thread.index("Subject: Office move")
    assert heads_section(thread, quoted, quoted + len("Subject: Office move"), "Office move")
    assert heading_above(thread, thread.index("Key fobs"), "x") == "Subject: Office move"
    assert heading_above(thread, thread.index("The move"), "x") == "Subject: RE: Office move"
