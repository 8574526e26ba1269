"""Words, sentences, numbers and names of English text: what evidence selection, the citation
check and answerability read."""

import re

from ragserve.rag.keyword import terms

CITATION = re.compile(r"\s*\[(\d+)\]")
# A sentence ends at . ! ? before a space or the end ("6.3" stays whole), or at a line break
# unless the next line goes on in lower case (a paragraph wrapped by hand): headings, list
# items, table rows and "Date: ..." lines stay sentences of their own.
SENTENCE = re.compile(r"(?:[^.!?\n]|[.!?](?=[^\s.!?])|\n(?=[ \t]*[a-z]))+(?:[.!?]+|(?=\n)|$)")
# Full stops that do not end a sentence: after a title, a Latin abbreviation or an initial
# (not "I", which ends "World War I.").
ABBREVIATION_END = re.compile(
    r"(?:^|[\s(])(?:Dr|Mr|Mrs|Ms|Prof|St|Mt|Jr|Sr|Gen|Col|Capt|Lt|Sgt|Rev|Hon|Gov|Sen|Rep|"
    r"vs|cf|approx|ca|e\.g|i\.e|[A-HJ-Z])\.$"
)
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
STOPWORDS = frozenset(
    [
        "the",
        "a",
        "an",
        "of",
        "and",
        "or",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "its",
        "this",
        "that",
        "as",
        "which",
        "who",
        "whom",
        "what",
        "when",
        "where",
        "why",
        "how",
        "not",
        "no",
        "yes",
        "do",
        "does",
        "did",
        "has",
        "have",
        "had",
        "can",
        "could",
        "will",
        "would",
        "shall",
        "should",
        "may",
        "might",
        "there",
        "their",
        "they",
        "them",
        "he",
        "she",
        "his",
        "her",
        "i",
        "you",
        "we",
        "our",
        "answer",
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
    """The text's sentences, stripped, with their character spans in it. A full stop after a
    title, a Latin abbreviation or an initial ("Dr. Jennifer Melfi", "e.g. a key", "J. Smith")
    does not end a sentence unless a line ends there."""
    spans: list[tuple[str, int, int]] = []
    for match in SENTENCE.finditer(text):
        piece = match.group().strip()
        if not piece:
            continue
        start = match.start() + match.group().index(piece)
        end = start + len(piece)
        if spans and ABBREVIATION_END.search(spans[-1][0]):
            _, previous_start, previous_end = spans[-1]
            if "\n" not in text[previous_end:start]:
                spans[-1] = (text[previous_start:end], previous_start, end)
                continue
        spans.append((piece, start, end))
    return spans


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
