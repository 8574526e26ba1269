"""Which heading a place in a document stands under."""

from ragserve.rag.headings import heading_above

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
