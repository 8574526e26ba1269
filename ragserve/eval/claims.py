"""An answer's claims, each with the passages it cites: the sentences of a text answer (split
as a reader would, so each quoted sentence is judged against its own source), or the cited
values of an answer held to a JSON schema. The ALCE citation scores (metrics.py) judge them."""

import re
from typing import Any

from ragserve.eval.metrics import CitedSentence
from ragserve.rag.answer_result import AnswerResult
from ragserve.rag.sentences import SENTENCE
from ragserve.rag.text import CITATION

# Markers that open a sentence piece close the one before it ("... 1279. [1] He reigned ...").
LEADING_CITATIONS = re.compile(r"(?:\s*\[\d+\])*")
# Citation markers followed by the start of another sentence (not in lower case): a quote
# cites each sentence it quotes, and a table row or a line ending in ";" has no full stop
# ("... | Price: 12 [1] Add-on: ...").
MARKERS_THEN_TEXT = re.compile(r"((?:\s*\[\d+\])+)[ \t]+(?=[^\s\[.!?,;:a-z])")


def cited_sentences(result: AnswerResult, passages: dict[str, str]) -> list[CitedSentence]:
    """The answer's sentences, each with the text of the passages its [n] markers name;
    markers after a sentence's full stop ("... 1279. [1]", as a quote is cited) are its own,
    and markers end a sentence that has no full stop when the next one begins in capitals.
    A schema answer's claims are its supported values, each with the sources of its field."""
    chunk_of = {c.n: c.chunk_id for c in result.citations}
    pieces: list[tuple[str, list[int]]] = []
    if result.value is not None:
        pieces = [
            (str(value_at(result.value, pointer)), marks)
            for pointer, marks in result.field_citations.items()
        ]
    answer = MARKERS_THEN_TEXT.sub(lambda m: m.group(1) + "\n", result.answer)
    for match in SENTENCE.finditer(answer if result.value is None else ""):
        leading = LEADING_CITATIONS.match(match.group()).group()
        if pieces:
            pieces[-1][1].extend(int(n) for n in CITATION.findall(leading))
        rest = match.group()[len(leading) :]
        text = CITATION.sub("", rest).strip()
        if text:
            pieces.append((text, [int(n) for n in CITATION.findall(rest)]))
    return [
        CitedSentence(
            text,
            [passages[chunk_of[n]] for n in dict.fromkeys(marks) if chunk_of.get(n) in passages],
        )
        for text, marks in pieces
    ]


def value_at(data: Any, pointer: str) -> Any:
    """The value a JSON pointer (RFC 6901) names."""
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        data = data[int(token)] if isinstance(data, list) else data[token]
    return data
