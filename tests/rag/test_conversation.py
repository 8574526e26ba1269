"""Follow-ups read with the user's earlier questions, and the questions a turn asks."""

from ragserve.rag.conversation import read_turn, standalone_query


def test_a_follow_up_replaces_only_terms_of_its_own_kind():
    query = standalone_query("How about October?", ["What was the NPS score in June?"])
    assert "NPS" in query and "June" not in query and "October" in query
    query = standalone_query("And for Denmark?", ["What is the hotel cap for Norway?"])
    assert "Norway" not in query and "hotel cap" in query


def test_a_question_that_stands_alone_is_read_as_asked():
    reading = read_turn("What is the hotel cap for Norway?", ["How long is probation?"])
    assert reading.query == "What is the hotel cap for Norway?"
    assert reading.parts == () and reading.own is None and reading.earlier is None
    assert reading.questions == [reading.query]


def test_a_follow_up_keeps_its_own_words_and_the_earlier_question():
    history = ["When does the night shift start?"]
    reading = read_turn("How many people are they hiring for it?", history)
    assert reading.query.startswith("How many people") and "night shift" in reading.query
    assert reading.own == "How many people are they hiring for it?"
    assert reading.earlier == history[0]
    assert reading.questions == [reading.query, reading.own, reading.earlier]
    # Too few words of its own to rank by: only the earlier question is kept apart.
    short = read_turn("How about September?", ["What was the NPS in July?"])
    assert short.own is None and short.earlier == "What was the NPS in July?"


def test_each_part_of_a_two_part_question_is_read_after_the_ones_before():
    reading = read_turn("How much did sales ask for in 2025 and how much did they get?")
    assert reading.parts[0] == "How much did sales ask for in 2025"
    assert reading.parts[1].startswith("how much did they get?")
    assert "sales" in reading.parts[1]


def test_a_follow_up_says_which_words_it_asks_anew():
    reading = read_turn("And a dedicated runner?", ["How much is an extra seat per month?"])
    assert reading.follow_up == "And a dedicated runner?"
    assert reading.new_words == {"dedic", "runner"}
    # Words the earlier question has are not new; a question that stands alone adds none.
    assert read_turn("And the extra seats?", ["How much is an extra seat?"]).new_words == set()
    assert read_turn("How much is an extra seat per month?").new_words == set()
