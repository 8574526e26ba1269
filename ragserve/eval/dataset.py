"""QA datasets: JSONL lines of {qid, question, answers, gold_doc, kind}, where gold_doc names
the document that answers the question (null for unanswerable questions).

Optional fields: type, one of single (one sentence answers it), multi (it needs several facts),
table (it needs a table cell) and followup (it needs the conversation so far); facts, the
facts a correct answer states, each a list of aliases (default: the answers, as one fact);
history, the earlier user turns of a followup question, oldest first."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("answerable", "unanswerable")
TYPES = ("single", "multi", "table", "followup")


class DatasetError(ValueError):
    pass


@dataclass(frozen=True)
class QAItem:
    qid: str
    question: str
    answers: tuple[str, ...]
    gold_doc: str | None
    kind: str
    type: str = "single"
    facts: tuple[tuple[str, ...], ...] = ()
    history: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.facts and self.answers:
            object.__setattr__(self, "facts", (self.answers,))

    @property
    def answerable(self) -> bool:
        return self.kind == "answerable"


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(s, str) and s.strip() for s in value):
        raise DatasetError(f"{what} must be a list of non-empty strings")
    return tuple(value)


def _facts(value: Any) -> tuple[tuple[str, ...], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise DatasetError("facts must be a non-empty list of lists of aliases")
    facts = []
    for fact in value:
        aliases = _strings(fact, "each fact")
        if not aliases:
            raise DatasetError("each fact must list at least one alias")
        facts.append(aliases)
    return tuple(facts)


def _item(record: Any) -> QAItem:
    if not isinstance(record, dict):
        raise DatasetError("not a QA record (a JSON object)")
    try:
        qid, question = str(record["qid"]), str(record["question"])
    except KeyError as error:
        raise DatasetError(f"not a QA record (no {error})") from error
    answers = record.get("answers") or []
    if not isinstance(answers, list):
        raise DatasetError("answers must be a list of aliases")
    answers = tuple(str(a) for a in answers)
    gold_doc = record.get("gold_doc")
    if gold_doc is not None and not isinstance(gold_doc, str):
        raise DatasetError("gold_doc must be a string or null")
    kind = record.get("kind") or ("answerable" if gold_doc else "unanswerable")
    if kind not in KINDS:
        raise DatasetError(f"kind must be one of {KINDS}, got {kind!r}")
    kind_of_question = record.get("type") or "single"
    if kind_of_question not in TYPES:
        raise DatasetError(f"type must be one of {TYPES}, got {kind_of_question!r}")
    facts = _facts(record.get("facts"))
    history = _strings(record.get("history") or [], "history")
    if kind_of_question == "followup" and not history:
        raise DatasetError("a followup question needs its history (the earlier user turns)")
    if kind == "answerable" and not (gold_doc and answers):
        raise DatasetError("an answerable question needs gold_doc, answers")
    if kind == "unanswerable" and facts:
        raise DatasetError("an unanswerable question has no facts")
    return QAItem(qid, question, answers, gold_doc, kind, kind_of_question, facts, history)


def load_dataset(path: Path) -> list[QAItem]:
    """Every line checked; the first bad one is reported with its line number."""
    if not path.is_file():
        raise DatasetError(f"dataset {path} does not exist")
    items: list[QAItem] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = _item(json.loads(line))
        except json.JSONDecodeError as error:
            raise DatasetError(f"{path}:{number}: not a QA record ({error})") from error
        except DatasetError as error:
            raise DatasetError(f"{path}:{number}: {error}") from error
        if item.qid in seen:
            raise DatasetError(f"{path}:{number}: duplicate qid {item.qid!r}")
        seen.add(item.qid)
        items.append(item)
    if not items:
        raise DatasetError(f"dataset {path} has no questions")
    return items
