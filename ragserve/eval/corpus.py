"""The corpus an evaluation indexes: the bundled Wikipedia corpus by default, a file (JSONL of
{id, title, text}, or a JSON object in the Wikipedia package's format), one document per entry,
or a folder of documents (txt, Markdown, HTML, PDF, docx, CSV, TSV, xlsx), one document per
file. Its digest names the cached index built from it."""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ragserve.rag.corpus import Article, load_wiki, wiki_doc_id, wiki_sources
from ragserve.rag.ingest import SourceDocument
from ragserve.rag.parsers import SUPPORTED_SUFFIXES, ParseError, parse_bytes

WIKI = "wiki"


class CorpusError(ValueError):
    pass


@dataclass
class EvalCorpus:
    """Documents to index. An article whose id is in `files` was read from a file: its text is
    what the product's parser extracts from the file, and it is ingested from the file's bytes
    (under its id as the file name), so indexing goes through the same parser path as an
    upload. Other articles are ingested from their text."""

    name: str
    articles: list[Article]
    files: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        digest = hashlib.sha256()
        for article in self.articles:
            digest.update(json.dumps([article.doc_id, article.title, article.text]).encode())
            if (data := self.files.get(article.doc_id)) is not None:
                digest.update(hashlib.sha256(data).digest())
        self.digest = digest.hexdigest()[:16]
        self._ids = {a.doc_id: a.doc_id for a in self.articles}
        self._ids.update({a.title: a.doc_id for a in self.articles})
        self.by_id = {a.doc_id: a for a in self.articles}

    def resolve(self, gold: str) -> str | None:
        """The document id a dataset's gold_doc names: an id (a file's path in a folder corpus),
        a title or a Wikipedia key."""
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
        files = {a.doc_id: self.files[a.doc_id] for a in chosen if a.doc_id in self.files}
        return EvalCorpus(f"{self.name}[:{limit}]", chosen, files)

    def sources(self) -> list[SourceDocument]:
        sources = []
        for article in self.articles:
            data = self.files.get(article.doc_id)
            if data is None:
                sources.extend(wiki_sources([article]))
            else:
                sources.append(SourceDocument(article.doc_id, data=data, doc_id=article.doc_id))
        return sources


def load_folder(path: Path) -> EvalCorpus:
    """Every file under `path` with a suffix the parsers read (hidden ones aside), in path
    order; each file's id is its path relative to the folder, e.g. "policies/travel.md"."""
    articles, files = [], {}
    paths = sorted(
        (p for p in path.rglob("*") if p.suffix.lower() in SUPPORTED_SUFFIXES and p.is_file()),
        key=lambda p: p.relative_to(path).as_posix(),
    )
    for file in paths:
        doc_id = file.relative_to(path).as_posix()
        if any(part.startswith(".") for part in Path(doc_id).parts):
            continue
        data = file.read_bytes()
        try:
            parsed = parse_bytes(data, doc_id)
        except ParseError as error:
            raise CorpusError(f"{path}: {error}") from error
        articles.append(Article(doc_id, parsed.title, parsed.text))
        files[doc_id] = data
    if not articles:
        raise CorpusError(
            f"corpus folder {path} holds no documents ({', '.join(sorted(SUPPORTED_SUFFIXES))})"
        )
    return EvalCorpus(path.name, articles, files)


def load_corpus(spec: str = WIKI) -> EvalCorpus:
    if spec == WIKI:
        return EvalCorpus(WIKI, load_wiki())
    path = Path(spec)
    if path.is_dir():
        return load_folder(path)
    if not path.is_file():
        raise CorpusError(f"corpus {spec} is neither 'wiki', a file nor a folder")
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
