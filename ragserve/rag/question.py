"""What a question asks for: the kind of answer it expects, and its specific terms.

Both transfer across domains, which is why answerability and evidence selection read them: a
"when" question is answered by a sentence with a date or a time, a "how many" question by one
with a number the question does not give, a "who" question by one naming someone the question
does not name; and a question's specific terms (names, numbers, codes: "Finland", "Q2",
"VM-40") must be found in the evidence, or the evidence is about something else (the per diem
for Sweden does not answer a question about Finland).
"""

import re
from typing import Literal

from ragserve.rag.text import numbers

Expected = Literal["person", "time", "quantity"]

PERSON = re.compile(r"\b(who|whom|whose)\b", re.IGNORECASE)
TIME = re.compile(
    r"\b(when|what time|what date|which date|which day|what day|what year|which year|"
    r"what month|which month|by when|how soon|until when|deadline)\b",
    re.IGNORECASE,
)
QUANTITY = re.compile(
    r"\b(how (many|much|long|often|far|big|large|old|high|heavy|fast|low|soon|deep|wide|"
    r"tall|hot|cold|warm|early|late)|"
    r"what (percentage|share|rate|amount|size|speed|temperature|number|price|fee|cost|"
    r"version|extension|limit|score|budget)|which version|\w+ (score|rate|number|"
    r"price|fee|cost|limit|budget|allowance|percentage) (was|is|are|were|of|for|in))\b",
    re.IGNORECASE,
)
TIME_WORDS = re.compile(
    r"\b(january|february|march|april|may|june|july|august|september|october|november|"
    r"december|monday|tuesday|wednesday|thursday|friday|saturday|sunday|today|tomorrow|"
    r"week|weeks|day|days|month|months|year|years|quarter)\b",
    re.IGNORECASE,
)
PERSON_NAME = re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)+")
# Names (a capital inside a sentence), codes with digits, numbers and acronyms.
SPECIFIC = re.compile(
    r"\b(?:[A-Za-z][\w-]*\d[\w-]*|\d[\d,.]*|[A-Z]{2,}[\w-]*)\b|(?<=[a-z,;] )[A-Z][a-z]+"
)


def expected_answer(question: str) -> Expected | None:
    """The kind of answer the question asks for, when its wording says (else None). A query
    of several questions (a follow-up read before the earlier ones, conversation.py) asks for
    what its first question that says asks for."""
    for part in question.split("?"):
        if PERSON.search(part):
            return "person"
        if TIME.search(part):
            return "time"
        if QUANTITY.search(part):
            return "quantity"
    return None


def answer_kind_match(question: str, sentence: str) -> float:
    """1 when the sentence holds the kind of answer the question expects, 0 when not, 0.5
    when the question does not say what kind it expects."""
    expected = expected_answer(question)
    if expected is None:
        return 0.5
    new_numbers = bool(numbers(sentence) - numbers(question))
    if expected == "quantity":
        return float(new_numbers)
    if expected == "time":
        return float(new_numbers or bool(TIME_WORDS.search(sentence)))
    asked = question.lower()
    return float(any(m.group().lower() not in asked for m in PERSON_NAME.finditer(sentence)))


def specific_terms(question: str) -> set[str]:
    """The question's names, codes and numbers, lower-cased."""
    return {term.lower() for term in SPECIFIC.findall(question)}


def missing_share(question: str, evidence: str) -> float:
    """Share of the question's specific terms that the evidence text lacks (0 when it has
    none)."""
    wanted = specific_terms(question)
    if not wanted:
        return 0.0
    text = evidence.lower()
    return sum(term not in text for term in wanted) / len(wanted)
