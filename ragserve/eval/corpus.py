"""The corpus an evaluation indexes: the bundled Wikipedia corpus by default, or a file
(JSONL of {id, title, text}, or a JSON object in the Wikipedia package's format), one document
per entry. Its digest names the cached index built from it."""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ragserve.rag.corpus import Article, load_wiki, wiki_doc_id, wiki_sources
from ragserve.rag.ingest import SourceDocument

WIKI = "wiki"


class CorpusError(ValueError):
    pass


@dataclass
class EvalCorpus:
    name: str
    articles: list[Article]

    def __post_init__(self) -> None:
        digest = hashlib.sha256()
        for article in self.articles:
            digest.update(json.dumps([article.doc_id, article.title, article.text]).encode())
        self.digest = digest.hexdigest()[:16]
        self._ids = {a.doc_id: a.doc_id for a in self.articles}
        self._ids.update({a.title: a.doc_id for a in self.articles})
        self.by_id = {a.doc_id: a for a in self.articles}

    def resolve(self, gold: str) -> str | None:
        """The document id a dataset's gold_doc names: an id, a title or a Wikipedia key."""
        return self._ids.get(gold) or self._ids.get(wiki_doc_id(gold))

    def subset(self, limit: int | None, keep: set[str]) -> "EvalCorpus":
        """The documents in `keep` and the first others, `limit` in all (None: everything),
        in corpus order."""
        if limit is None or limit >= len(self.articles):
            return self
        others = max(0, limit - len(keep))
        chosen = []
        for article in self.articles:
            if article.doc_id in keep:
                chosen.append(article)
            elif others > 0:
                chosen.append(article)
                others -= 1
        return EvalCorpus(f"{self.name}[:{limit}]", chosen)

    def sources(self) -> list[SourceDocument]:
        return list(wiki_sources(self.articles))


def load_corpus(spec: str = WIKI) -> EvalCorpus:
    if spec == WIKI:
        return EvalCorpus(WIKI, load_wiki())
    path = Path(spec)
    if not path.is_file():
        raise CorpusError(f"corpus {spec} is neither 'wiki' nor a file")
    if path.suffix == ".json":
        return EvalCorpus(path.name, load_wiki(path))
    articles = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            articles.append(
                Article(str(record["id"]), str(record.get("title") or ""), record["text"])
            )
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise CorpusError(f"{path}:{number}: not a {{id, title, text}} record") from error
    return EvalCorpus(path.name, articles)
