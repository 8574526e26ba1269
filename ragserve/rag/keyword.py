"""Keyword relevance: BM25 over stemmed words, every statistic taken from what the reader may read.

A reader's scores and order must be a function of the documents that reader may read and of
nothing else (DESIGN.md §6). BM25 needs collection statistics (the number of chunks, their
average length, each term's document frequency); taken over the whole index, as full-text
engines do, a document the reader cannot see moves those statistics, and so the reader's scores
and ranks, which RRF turns into readable numbers. So both stores keep their own postings (term,
chunk, count) and each chunk's length in tokens, and a search computes N, the average length
and every document frequency in the same ACL-filtered query that finds the candidates. The
tokenizer and the scoring are this module's, shared by both stores, so SQLite and PostgreSQL
give the same scores for the same readable chunks.
"""

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

import Stemmer

# Okapi BM25's usual constants (as FTS5, Lucene and Elasticsearch use them).
K1 = 1.2
B = 0.75
# A query's distinct terms beyond this are ignored: each one is a postings lookup.
MAX_QUERY_TERMS = 64
# Letters and digits of any script ("kākāpō" is one word); what keyword search, evidence and
# answerability all count as a word.
WORD = re.compile(r"[^\W_]+")


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    # The original Porter algorithm: what SQLite's FTS5 `porter` tokenizer used before.
    return Stemmer.Stemmer("porter")


def _words(text: str) -> list[str]:
    """Lower-cased words with diacritics removed (`café` matches `cafe`), split at anything
    that is not a letter or a digit."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return WORD.findall(plain)


def terms(text: str) -> list[str]:
    """The text's index terms (stems), in order, repeats kept."""
    return _stemmer().stemWords(_words(text))


def term_counts(text: str) -> tuple[dict[str, int], int]:
    """What a chunk's postings hold: each term's count, and the chunk's length in terms."""
    found = terms(text)
    return dict(Counter(found)), len(found)


def query_terms(query: str) -> list[str]:
    """A query's distinct terms in order of first use, at most MAX_QUERY_TERMS: all a keyword
    search is built from, so no user text reaches a query parser as syntax."""
    return list(dict.fromkeys(terms(query)))[:MAX_QUERY_TERMS]


def bm25_top(
    postings: Iterable[tuple[str, int, int, int]], chunks: int, tokens: int, k: int
) -> list[tuple[int, float]]:
    """The k best (chunk key, score) pairs, best first, from the readable postings of the
    query's terms: (term, chunk key, count in the chunk, chunk length). chunks and tokens are
    the number of readable chunks and their total length.

    Chunk keys must order chunks by insertion (row ids do): ties go to the older chunk, so the
    order between two readable chunks never depends on chunks in between. Each chunk's sum is
    exactly rounded (fsum), so it does not depend on the order its postings came in either.
    """
    by_term: dict[str, list[tuple[int, int, int]]] = {}
    for term, key, count, length in postings:
        by_term.setdefault(term, []).append((key, count, length))
    if not by_term or chunks <= 0:
        return []
    average = tokens / chunks if tokens else 1.0
    parts: dict[int, list[float]] = {}
    for matches in by_term.values():
        n = len(matches)
        # Lucene's form: always positive, so a term in most chunks still counts a little.
        idf = math.log(1.0 + (chunks - n + 0.5) / (n + 0.5))
        for key, count, length in matches:
            norm = K1 * (1.0 - B + B * length / average)
            parts.setdefault(key, []).append(idf * count * (K1 + 1.0) / (count + norm))
    scores = [(key, math.fsum(values)) for key, values in parts.items()]
    scores.sort(key=lambda pair: (-pair[1], pair[0]))
    return scores[:k]
