"""BM25 document lengths, computed once in Python at write time and stored by both stores.

Lucene's BM25 normalises a term's frequency by the document's length against the scope's
mean. The two stores tokenize differently (PostgreSQL's english parser drops stopwords;
FTS5 counts every token), so each used to take its own count and the same document had
two lengths. Now both store these: the content length counts the words of the indexed text
(title, path, the path's parts, the first `INDEXED_BODY_CHARS` of the body) split on
whitespace and ASCII punctuation, stopwords (PostgreSQL's english.stop) skipped; the
n-gram length counts the space-separated script n-grams.
"""

from __future__ import annotations

import string

from service.projects.lexical_tokens import POSTGRES_ENGLISH_STOPWORDS

__all__ = [
    "INDEXED_BODY_CHARS",
    "INDEXED_NGRAM_CHARS",
    "content_length",
    "indexed_text",
    "lexeme_count",
    "ngram_length",
]

# Words of a body beyond this many characters are not indexed on PostgreSQL (a tsvector
# holds at most 1 MiB); the length counts the same words on both stores.
INDEXED_BODY_CHARS = 100_000
INDEXED_NGRAM_CHARS = 100_000

# ASCII punctuation separates words (as in the english parser); translate + split run in C.
_PUNCTUATION = str.maketrans({c: " " for c in string.punctuation})
_PATH_WORDS = str.maketrans("/._-", "    ")


def indexed_text(title: str, path: str, body: str) -> str:
    """The text PostgreSQL's tsvector is built from (path parts split on / . _ -)."""
    return f"{title} {path} {path.translate(_PATH_WORDS)} {body[:INDEXED_BODY_CHARS]}"


def lexeme_count(text: str) -> int:
    """About how many lexemes `to_tsvector('english', text)` holds, repeats included."""
    words = text.lower().translate(_PUNCTUATION).split()
    return len(words) - sum(map(POSTGRES_ENGLISH_STOPWORDS.__contains__, words))


def content_length(title: str, path: str, body: str) -> int:
    """BM25 length of a document's content column."""
    return lexeme_count(indexed_text(title, path, body))


def ngram_length(ngrams: str) -> int:
    """BM25 length of a document's n-gram column."""
    return len(ngrams[:INDEXED_NGRAM_CHARS].split())
