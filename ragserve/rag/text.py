"""Words, numbers and names of English text: what evidence selection, the citation
check and answerability read."""

import re

from ragserve.rag.keyword import WORD, terms

CITATION = re.compile(r"\s*\[(\d+)\]")
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
_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.?"
)
# A full date: "8 April 2025", "April 8, 2025", "2025-04-08".
DATE = re.compile(
    rf"\b\d{{1,2}} {_MONTH} \d{{4}}\b|\b{_MONTH} \d{{1,2}}, \d{{4}}\b|\b\d{{4}}-\d\d-\d\d\b"
)
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
# The capital and the small letters of the Latin, Greek and Cyrillic alphabets, for character
# classes: `re` has no Unicode case classes, and names are not all ASCII ("Øystein", "Émile").
CAPITALS = "".join(re.escape(c) for c in map(chr, range(0x530)) if c.isupper())
SMALLS = "".join(re.escape(c) for c in map(chr, range(0x530)) if c.islower())
CAPITAL, SMALL = f"[{CAPITALS}]", f"[{SMALLS}]"
# Capitalised words (with inner hyphens or apostrophes) joined by single spaces or hyphens.
NAME_PHRASE = re.compile(rf"{CAPITAL}[\w'’]*(?:[ -]{CAPITAL}[\w'’]*)+")
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
    words = re.findall(rf"(?<=[\w,;:)] ){CAPITAL}[\w'’-]+", sentence)
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
