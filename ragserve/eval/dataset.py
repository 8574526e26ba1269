"""QA datasets: JSONL lines of {qid, question, answers, gold_doc, kind}, where gold_doc names
the document that answers the question (null for unanswerable questions)."""

import json
from dataclasses import dataclass
from pathlib import Path

KINDS = ("answerable", "unanswerable")


class DatasetError(ValueError):
    pass


@dataclass(frozen=True)
class QAItem:
    qid: str
    question: str
    answers: tuple[str, ...]
    gold_doc: str | None
    kind: str

    @property
    def answerable(self) -> bool:
        return self.kind == "answerable"


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
            record = json.loads(line)
            item = QAItem(
                str(record["qid"]),
                str(record["question"]),
                tuple(str(a) for a in record.get("answers") or ()),
                record.get("gold_doc"),
                record.get("kind") or ("answerable" if record.get("gold_doc") else "unanswerable"),
            )
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise DatasetError(f"{path}:{number}: not a QA record ({error})") from error
        if item.kind not in KINDS:
            raise DatasetError(f"{path}:{number}: kind must be one of {KINDS}, got {item.kind!r}")
        if item.answerable and not (item.gold_doc and item.answers):
            raise DatasetError(f"{path}:{number}: an answerable question needs gold_doc, answers")
        if item.qid in seen:
            raise DatasetError(f"{path}:{number}: duplicate qid {item.qid!r}")
        seen.add(item.qid)
        items.append(item)
    if not items:
        raise DatasetError(f"dataset {path} has no questions")
    return items
