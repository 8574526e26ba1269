"""Words, sentences, numbers and names of English text: what evidence selection, the citation
check and answerability read."""

import re

from ragserve.rag.keyword import terms

CITATION = re.compile(r"\s*\[(\d+)\]")
# A sentence ends at . ! ? before a space or the end ("6.3" stays whole), or at a line break
# unless the next line goes on in lower case (a paragraph wrapped by hand, in a quote of an
# email or Markdown too: "> instead of 15:00."): headings, list items, table rows and
# "Date: ..." lines stay sentences of their own. Leader dots before a value on their line
# ("Single article limit ...... GBP 1,500") end nothing.
LEADER = re.compile(r"(?<=[ \t])\.{3,}[ \t]+(?=\S)")
SENTENCE = re.compile(
    rf"(?:[^.!?\n]|{LEADER.pattern}|[.!?](?=[^\s.!?])|\n(?=[ \t>]*[a-z]))+(?:[.!?]+|(?=\n)|$)"
)
# What a quoted line starts with ("> ", ">> "), and a line break with it.
QUOTE_MARKS = "> \t"
QUOTED_BREAK = re.compile(r"\n[ \t]*>[> \t]*")
# The opening or closing line of a fenced block of code ("```sh", "~~~").
FENCE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*$", re.M)
# Full stops that do not end a sentence: after a title, a Latin abbreviation or an initial
# (not "I", which ends "World War I.").
ABBREVIATION_END = re.compile(
    r"(?:^|[\s(])(?:Dr|Mr|Mrs|Ms|Prof|St|Mt|Jr|Sr|Gen|Col|Capt|Lt|Sgt|Rev|Hon|Gov|Sen|Rep|"
    r"vs|cf|approx|ca|e\.g|i\.e|[A-HJ-Z])\.$"
)
# A line this long that stops mid-sentence was wrapped by hand (typical widths are 70-100).
WRAPPED_LINE_CHARS = 50
# Articles, prepositions, conjunctions, auxiliaries and determiners: no content word (a
# stopword) and no word a sentence ends on.
FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "by",
        "can",
        "could",
        "for",
        "from",
        "her",
        "his",
        "in",
        "is",
        "its",
        "may",
        "might",
        "not",
        "of",
        "on",
        "or",
        "our",
        "shall",
        "should",
        "that",
        "the",
        "their",
        "this",
        "to",
        "was",
        "were",
        "when",
        "which",
        "will",
        "with",
        "would",
    ]
)
# Words a sentence does not end on: a line ending in one goes on in the next.
CONTINUING_WORDS = FUNCTION_WORDS | frozenset(
    [
        "about",
        "after",
        "before",
        "between",
        "but",
        "if",
        "into",
        "must",
        "nor",
        "onto",
        "over",
        "per",
        "than",
        "these",
        "those",
        "under",
        "unless",
        "until",
        "via",
        "while",
        "whose",
        "your",
    ]
)
COLUMN_GAP = re.compile(r"\S {3,}\S|\t")
NEW_LINE_ITEM = re.compile(r"[-*•+#|=_]|\d+[.)]\s|\d+\s\s|[A-Z][A-Za-z ]{0,30}:\s")
_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.?"
)
# A full date: "8 April 2025", "April 8, 2025", "2025-04-08".
DATE = re.compile(
    rf"\b\d{{1,2}} {_MONTH} \d{{4}}\b|\b{_MONTH} \d{{1,2}}, \d{{4}}\b|\b\d{{4}}-\d\d-\d\d\b"
)
LIST_MARK = re.compile(r"^(?:[-*•+]|\d{1,3}\.)\s+")
# The number of a numbered heading or list item ("6. How to claim a credit").
LIST_NUMBER = re.compile(r"\d{1,3}\.")
# What parts the cells of a table's row line ("Month: July | CSAT: 4.6"; parsers/tables.py).
ROW_CELLS = " | "
WORD = re.compile(r"[a-z0-9]+")
NUMBER = re.compile(r"\d[\d,.]*\d|\d")
# A number and the word or symbol after it (its unit, when it has one).
QUANTITY = re.compile(r"(\d[\d,.]*\d|\d)(?:\s?(%|€|\$|£|[A-Za-z]+))?")
UNIT_NAMES = {
    "euro": "eur",
    "euros": "eur",
    "€": "eur",
    "krone": "nok",
    "kroner": "nok",
    "kr": "nok",
    "dollar": "usd",
    "dollars": "usd",
    "$": "usd",
    "pound": "gbp",
    "pounds": "gbp",
    "£": "gbp",
    "percent": "%",
    "%": "%",
    "eur": "eur",
    "nok": "nok",
    "usd": "usd",
    "gbp": "gbp",
}
UNIT_CODE = re.compile(r"[A-Z]{2,4}")
NEGATION = re.compile(
    r"\b(not|no|never|none|nobody|nothing|neither|nor|cannot|without)\b|n't\b", re.IGNORECASE
)
# Capitalised words (with inner hyphens or apostrophes) joined by single spaces or hyphens.
NAME_PHRASE = re.compile(r"[A-Z][\w'’]*(?:[ -][A-Z][\w'’]*)+")
STOPWORDS = FUNCTION_WORDS | frozenset(
    [
        "answer",
        "did",
        "do",
        "does",
        "had",
        "has",
        "have",
        "he",
        "how",
        "i",
        "it",
        "no",
        "she",
        "them",
        "there",
        "they",
        "we",
        "what",
        "where",
        "who",
        "whom",
        "why",
        "yes",
        "you",
    ]
)
STEM_CHARS = 6
NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
}


def content_words(text: str) -> set[str]:
    """Content words cut to their first letters, a crude stem (launch, launches, launched),
    with small numbers as digits (four, 4)."""
    words = (NUMBER_WORDS.get(w, w) for w in WORD.findall(text.lower()))
    return {w[:STEM_CHARS] for w in words if w not in STOPWORDS and (len(w) > 1 or w.isdigit())}


def stems(text: str) -> set[str]:
    """Content words as Porter stems (chaired, chair; allowances, allowance), small numbers
    as digits: what evidence selection and answerability compare a question with."""
    words = (NUMBER_WORDS.get(w, w) for w in WORD.findall(text.lower()))
    kept = [w for w in words if w not in STOPWORDS and (len(w) > 1 or w.isdigit())]
    return set(terms(" ".join(kept)))


def sentence_spans(text: str) -> list[tuple[str, int, int]]:
    """The text's sentences, stripped (of quote marks too), with their character spans in it.
    A full stop after a title, a Latin abbreviation or an initial ("Dr. Jennifer Melfi", "e.g.
    a key", "J. Smith") does not end a sentence unless a line ends there, and a table's row
    line is one sentence whatever its cells hold ("Value: 10 ... 30 | Unit: V DC"). The fence
    of a block of code ("```sh") is no sentence, and no sentence goes on across one (a chunk
    may start inside a block, so which fences open one is not known)."""
    spans, start = [], 0
    for fence in FENCE.finditer(text):
        spans += _prose_spans(text, start, fence.start())
        start = fence.end()
    return spans + _prose_spans(text, start, len(text))


def _prose_spans(text: str, start: int, end: int) -> list[tuple[str, int, int]]:
    spans: list[tuple[str, int, int]] = []
    for match in SENTENCE.finditer(text, start, end):
        piece = match.group().strip().lstrip(QUOTE_MARKS)
        if not piece:
            continue
        first = match.start() + match.group().index(piece)
        last = first + len(piece)
        if spans:
            previous, previous_start, previous_end = spans[-1]
            between = text[previous_end:first]
            joined = (
                "\n" not in between
                if ABBREVIATION_END.search(previous)
                or LIST_NUMBER.fullmatch(previous)
                or ROW_CELLS in _line_at(text, previous_start)
                else _wrapped_line(text, previous_end, between)
            )
            if joined:
                spans[-1] = (text[previous_start:last], previous_start, last)
                continue
        spans.append((piece, first, last))
    return spans


def _line_at(text: str, position: int) -> str:
    """The whole line the position stands in."""
    end = text.find("\n", position)
    return text[text.rfind("\n", 0, position) + 1 : len(text) if end < 0 else end]


def _wrapped_line(text: str, previous_end: int, between: str) -> bool:
    """Whether a sentence piece that ends a line goes on in the next line, which starts with
    a capital or a digit (the regex already joins a line going on in lower case): the text was
    wrapped by hand (a plain-text file, a PDF's lines), so the line is long and ends in a
    comma or a word that cannot end a sentence ("... to run pipelines from" / "Conductor
    5.0."), and the next line starts no list item, numbered row, heading or table row. Lines
    of a list without marks ("Lars Eide — ... — 1 November 2024") end in a name or a date, and
    a table row or a row of a fixed-width table (wide gaps) ends where it ends."""
    if between.count("\n") != 1 or between.strip(QUOTE_MARKS + "\n"):
        return False
    line = text[text.rfind("\n", 0, previous_end) + 1 : previous_end].strip()
    if len(line) < WRAPPED_LINE_CHARS or "|" in line or COLUMN_GAP.search(line):
        return False
    last = line.rsplit(None, 1)[-1].lower()
    if not (line.endswith(",") or last in CONTINUING_WORDS):
        return False
    return not NEW_LINE_ITEM.match(text, previous_end + len(between))


def as_prose(quote: str) -> str:
    """A quoted sentence as a line of an answer: without the list mark or number it had in its
    document, and with the line breaks and indents of a wrapped paragraph as single spaces
    (the citation keeps the exact text and its span)."""
    return LIST_MARK.sub("", " ".join(QUOTED_BREAK.sub("\n", quote).split()))


def numbers(text: str) -> set[str]:
    return {n.replace(",", "").rstrip(".") for n in NUMBER.findall(text)}


def quantities(text: str) -> set[tuple[str, str]]:
    """Each number with its unit when one is written after it: a currency or percent under
    one name however written ("1,800 Euros", "1,800 EUR", "€": ("1800", "eur")), or a unit
    code in capitals ("40 GB"); "" for anything else (words like "days" are content words,
    checked as such)."""
    found = set()
    for match in QUANTITY.finditer(text):
        written = match.group(2) or ""
        unit = UNIT_NAMES.get(written.lower(), "")
        if not unit and UNIT_CODE.fullmatch(written):
            unit = written.lower()
        found.add((match.group(1).replace(",", "").rstrip("."), unit))
    return found


def negated(text: str) -> bool:
    return bool(NEGATION.search(text))


def _normalised(text: str) -> str:
    return " " + " ".join(re.findall(r"[\w'’]+", text.lower())) + " "


def introduced_names(sentence: str, question: str) -> list[str]:
    """Capitalised words after a sentence's first word that the question does not give: the
    names a claim introduces ("Sofie", "Tallinn")."""
    asked = _normalised(question)
    words = re.findall(r"(?<=[\w,;:)] )[A-Z][\w'’-]+", sentence)
    return [w for w in words if f" {w.lower()} " not in asked]


def introduced_phrases(sentence: str, question: str) -> list[str]:
    """Multi-word names and terms of the sentence that the question does not give, without a
    leading stopword ("The Russian Messenger" -> "Russian Messenger")."""
    phrases = []
    asked = _normalised(question)
    for match in NAME_PHRASE.finditer(sentence):
        words = match.group().replace("-", " ").split()
        while words and words[0].lower() in STOPWORDS:
            words = words[1:]
        if len(words) > 1 and _normalised(" ".join(words)) not in asked:
            phrases.append(" ".join(words))
    return phrases


def contains_phrase(text: str, phrase: str) -> bool:
    """The phrase's words, in order and adjacent, in the text (case, hyphens and punctuation
    aside)."""
    return _normalised(phrase) in _normalised(text)
