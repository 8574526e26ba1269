"""What a question asks for: its parts, the kind of answer it expects, and its specific terms.

A question may ask two things ("..., and who signs off?"); each part is answered by a sentence
of its own. The kind of answer and the specific terms transfer across domains, which is why
answerability and evidence selection read them: a "when" question (or "what date") is
answered by a sentence with a date or a time, a "how many" question (or "how tight", "per km",
"what do I pay", or one that asks for a measure: "what monthly uptime", "at what elevation") by
one with a number (in digits or words) the question does not give, a "who" question by one
naming someone (or a role, a desk, a team) the question does not name; and a question's
specific terms (names, numbers, codes: "Finland", "Q2", "VM-40") must be found in the
evidence, or the evidence is about something else (the per diem for Sweden does not answer a
question about Finland). A table row answers when the question names both its entity and the
column asked for (row_match).
"""

import re
from typing import Literal

from ragserve.rag.parsers.tables import row_cells
from ragserve.rag.sentences import sentence_spans
from ragserve.rag.text import (
    CAPITAL,
    NAME_PHRASE,
    NUMBER_WORDS,
    SMALL,
    SMALLS,
    UNIT_NAMES,
    WORD,
    numbers,
    stems,
)

Expected = Literal["person", "time", "quantity"]

# "What/which" and up to three words before the noun the question asks about ("What was the
# measured monthly uptime ...?", "At what elevation ...?").
_ASKED_NOUN = r"(?:what|which)(?:'s|\s+(?:is|was|are|were))?(?:\s+the)?(?:\s+[\w'-]+){0,3}?\s+"
# Nouns that name a measure: asked about, they want a number.
MEASURE_NOUNS = (
    r"amount|number|total|price|cost|fee|charge|rate|percentage|share|ratio|score|limit|cap|"
    r"maximum|minimum|budget|allowance|salary|discount|deposit|threshold|size|length|width|"
    r"height|depth|elevation|altitude|weight|distance|speed|temperature|population|capacity|"
    r"duration|frequency|age|uptime|availability|half-life|value|version|extension"
)
PERSON = re.compile(r"\b(who|whom|whose)\b", re.IGNORECASE)
TIME = re.compile(
    r"\b(when|what time|what date|which date|which day|what day|what year|which year|"
    rf"what month|which month|by when|how soon|until when|deadline|{_ASKED_NOUN}date)\b",
    re.IGNORECASE,
)
# "How" and the word after it that names what is measured ("how heavy", "how tight").
_HOW_MEASURE = (
    r"how (?!(?:do|does|did|can|could|should|would|will|is|are|was|were|to|about|come)\b)[a-z]+"
)
HOW_MEASURE = re.compile(rf"\b{_HOW_MEASURE}\b", re.IGNORECASE)
QUANTITY = re.compile(
    r"\b(how (many|much|long|often|far|big|large|old|high|heavy|fast|low|soon|deep|wide|"
    r"tall|hot|cold|warm|early|late)|"
    r"\w+ (score|rate|number|price|fee|cost|limit|budget|allowance|percentage) "
    r"(was|is|are|were|of|for|in)|"
    rf"{_HOW_MEASURE}|"
    r"per (?:km|mile|day|week|month|year|hour|night|person|employee|head|unit|item)|"
    r"what (?:do|does|did|will|would) (?:\w+ ){1,3}(?:pay|cost|charge|earn|get)|"
    rf"{_ASKED_NOUN}(?:{MEASURE_NOUNS})s?)\b",
    re.IGNORECASE,
)
TIME_WORDS = re.compile(
    r"\b(january|february|march|april|may|june|july|august|september|october|november|"
    r"december|monday|tuesday|wednesday|thursday|friday|saturday|sunday|today|tomorrow|"
    r"week|weeks|day|days|month|months|year|years|quarter)\b",
    re.IGNORECASE,
)
# Words beyond the small numbers that state a count or a frequency ("thirty", "twice a year").
COUNT_WORDS = frozenset(
    [
        "thirty",
        "forty",
        "fifty",
        "sixty",
        "hundred",
        "thousand",
        "million",
        "billion",
        "dozen",
        "half",
        "twice",
        "once",
    ]
)
PERSON_NAME = re.compile(rf"\b{CAPITAL}{SMALL}+(?: {CAPITAL}{SMALL}+)+")
# Who answers "who" when no name does: a role, an acronym of one, a desk or a team.
ROLE = re.compile(
    r"\b(?:[A-Z]{2,5}|(?i:manager|director|officer|head|chair|chairperson|lead|leader|owner|"
    r"supervisor|team|desk|department|committee|board|coordinator|administrator|"
    r"representative|secretary))\b"
)
# Currency and unit codes in capitals are not roles.
UNITS = frozenset(name.upper() for name in UNIT_NAMES)
QUESTION_WORD = re.compile(r"\b(who|whom|whose|what|when|where|which|why|how)\b", re.IGNORECASE)
# A question word that only hands the question on to what was asked before.
HANDS_ON = re.compile(r"(?:what|how) about\b|what if\b", re.IGNORECASE)
CLAUSE_WORDS = frozenset({"who", "whom", "whose", "when"})
# Names (a capital inside a sentence), codes with digits, numbers and acronyms.
SPECIFIC = re.compile(
    rf"\b(?:[^\W\d_][\w-]*\d[\w-]*|\d[\d,.]*|{CAPITAL}{{2,}}[\w-]*)\b"
    rf"|(?<=[{SMALLS},;] ){CAPITAL}{SMALL}+"
)


# Where a question asks a second thing: a question word (or a preposition and one: "to when",
# "after how long") after ", and" (or "but"), after a bare "and" when a verb follows within
# three words ("... and how much did they get?", not "how pheromones evolved and what roles
# they play is ..."), or a new question after a question mark. "and" between nouns ("the per
# diem and the hotel limit") joins what one sentence or table row may state, and does not split.
_AUX = r"(?:is|are|was|were|does|do|did|can|could|should|must|may|will|would|has|have)"
_ASKS = (
    r"(?:(?:to|by|from|for|in|at|of|on|with|after|before|until|within|during)\s+)?"
    rf"(?:who|whom|whose|what|when|where|which|why|how|{_AUX})\b"
)
SECOND_QUESTION = re.compile(
    rf",\s*(?:and|but)\s+(?={_ASKS})"
    rf"|\s+(?:and|but)\s+(?={_ASKS}(?:\s+[\w'’-]+){{0,2}}?\s+{_AUX}\b)"
    r"|(?<=\?)\s+(?=\S)",
    re.IGNORECASE,
)


def question_parts(question: str) -> list[str]:
    """The questions a question asks, in order (one for most)."""
    return [part.strip() for part in SECOND_QUESTION.split(question) if part.strip()]


def expected_answer(question: str) -> Expected | None:
    """The kind of answer the question asks for, when its wording says (else None): the
    earliest phrase of a kind in the question, the shorter of two that start together ("What
    was the date of the price change?" asks for a date, not a price). A bare "who" or "when"
    after another question word opens a clause ("Which app do I use when signing in?" asks for
    an app). A query of several questions (a follow-up or a question's second part read before
    the earlier ones, conversation.py) asks for what its first question that says asks for,
    unless that one asks with a question word of its own: "which bin does it go in?" read
    before "How often is paper collected?" asks for a bin, not a number, while "How about
    September?" asks again what was asked before."""
    for part in question.split("?"):
        first = QUESTION_WORD.search(part)
        lead = first.start() if first else 0
        found = []
        for kind, pattern in (("person", PERSON), ("time", TIME), ("quantity", QUANTITY)):
            for match in pattern.finditer(part):
                if match.group().lower() in CLAUSE_WORDS and match.start() > lead:
                    continue
                found.append((match.start(), match.end(), kind))
                break
        if found:
            return min(found)[2]
        if first and not HANDS_ON.match(part, first.start()):
            return None
    return None


def answer_kind_match(question: str, sentence: str) -> float:
    """1 when the sentence holds the kind of answer the question expects, 0 when not, 0.5
    when the question does not say what kind it expects. A person is a name, a role ("the
    CFO", "your manager") or a desk or team the question does not name."""
    expected = expected_answer(question)
    if expected is None:
        return 0.5
    new_numbers = bool(_quantities(sentence) - _quantities(question))
    if expected == "quantity":
        return float(new_numbers)
    if expected == "time":
        return float(new_numbers or bool(TIME_WORDS.search(sentence)))
    asked = question.lower()
    named = (m.group().lower() for m in PERSON_NAME.finditer(sentence))
    roles = (m.group().lower() for m in ROLE.finditer(sentence) if m.group() not in UNITS)
    return float(any(term not in asked for term in (*named, *roles)))


SpecificKind = Literal["time", "number", "code", "acronym", "name"]


def specific_kind(term: str) -> SpecificKind:
    """What a specific term is: a month or weekday, a number, a code (digits among letters),
    an acronym, or a name."""
    if TIME_WORDS.fullmatch(term):
        return "time"
    if term[0].isdigit():
        return "number"
    if any(c.isdigit() for c in term):
        return "code"
    return "acronym" if term.isupper() else "name"


def _quantities(text: str) -> set[str]:
    """The numbers the text states, in digits or in words ("six months": "6")."""
    words = WORD.findall(text.lower())
    spelled = {NUMBER_WORDS.get(w, w) for w in words if w in NUMBER_WORDS or w in COUNT_WORDS}
    return numbers(text) | spelled


def specific_terms(question: str) -> set[str]:
    """The names, codes and numbers of the question's sentences that ask, lower-cased: a
    statement before them ("My wife is due in June. How much paid leave do I get?") tells the
    asker's situation, which a document that answers need not name."""
    asking = [text for text, _, _ in sentence_spans(question) if text.endswith("?")]
    return {term.lower() for term in SPECIFIC.findall(" ".join(asking) or question)}


def missing_share(question: str, evidence: str) -> float:
    """Share of the question's specific terms that the evidence text lacks (0 when it has
    none). An acronym is also found spelled out ("UK": "United Kingdom"), and a plural in the
    singular ("on Saturdays": "Saturday 09:00-15:00")."""
    wanted = specific_terms(question)
    if not wanted:
        return 0.0
    text = evidence.lower()
    spelled = {
        "".join(word[0] for word in re.split(r"[ -]", phrase)).lower()
        for phrase in NAME_PHRASE.findall(evidence)
    }
    return sum(
        term not in text and term not in spelled and not _singular_in(term, text) for term in wanted
    ) / len(wanted)


def _singular_in(term: str, text: str) -> bool:
    """Whether the text holds a plural or possessive term without its s, as a whole word
    ("Saturdays" as "Saturday", "Dolorex's" as "Dolorex"; "Paris" is not "pari")."""
    if len(term) <= 3 or term[-1] != "s" or term[-2].isdigit():
        return False
    singular = term.removesuffix("'s").removesuffix("s")
    return re.search(rf"(?<!\w){re.escape(singular)}(?!\w)", text) is not None


def row_match(question: str, sentence: str) -> float:
    """1 when the sentence is a table row ("Item: Gateway SG-2 | Lead time: 5 weeks") that the
    question names twice over: a cell's value it asks about ("the SG-2 gateway") and another
    cell's column, most of whose label it uses ("lead time"). Else 0: a row of another entity
    ("Country: Finland" for a question on Oslo) or a sentence that is no row."""
    cells = row_cells(sentence)
    if cells is None:
        return 0.0
    asked = stems(question)
    columns = [i for i, (label, _) in enumerate(cells) if mostly_in(stems(label), asked)]
    values = [i for i, (_, value) in enumerate(cells) if stems(value) & asked]
    return float(any(column != value for column in columns for value in values))


def row_named(question: str, sentence: str) -> float:
    """1 when the sentence is a table row whose key, its first cell ("Plan: Business",
    "Severity: SEV-1", "Month: July"), the question names in full; else 0. Rows of one table
    differ by their key, so a question on the Business plan is not answered by the Team
    plan's row, nor by an add-on's row that lists Business among its plans."""
    cells = row_cells(sentence)
    if cells is None:
        return 0.0
    key = stems(cells[0][1])
    return float(bool(key) and key <= stems(question))


def mostly_in(words: set[str], asked: set[str]) -> bool:
    """Whether the question's words hold at least half of the words (a column's label)."""
    return bool(words) and 2 * len(words & asked) >= len(words)
