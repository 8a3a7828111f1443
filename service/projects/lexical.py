"""Lexical query compilation for project search: one user text, both stores' query strings.

How stores use a `LexicalQuery` (SQLite FTS5 table `fts5(content, ngrams)`; PostgreSQL
`to_tsvector('english', title || ' ' || path || ' ' || body)` and
`to_tsvector('simple', ngrams)`):

- `fts5` is the complete MATCH expression (it names the columns itself).
- PostgreSQL matches `english @@ to_tsquery('english', tsquery)` (skipped when None) AND
  `ngrams @@ to_tsquery('simple', script_tsquery)` (skipped when None).
- `fts5 is None` means nothing searchable (empty text, `*`, only punctuation): no lexical
  channel. `FTS5_MATCH_NOTHING` / `TSQUERY_MATCH_NOTHING` mean a query that matches no row
  (explicit pure negation such as `(NOT dogs) OR (NOT cats)`: FTS5 has no unary NOT).
- Relaxed forms, when not None, search words only (no gram phrases): their matches that
  the strict form misses rank after the strict matches (a second tier, decided over the
  whole scope). `score_words` / `score_grams` are the terms BM25 sums over.

Rules: see `service.projects.lexical_parse` (syntax), `lexical_relax` (relaxation) and
`lexical_script` (CJK and other unsegmented scripts).
"""

from __future__ import annotations

from dataclasses import dataclass

from service.projects.lexical_fts5 import (
    CONTENT_COLUMN,
    FTS5_MATCH_NOTHING,
    NGRAMS_COLUMN,
    render_fts5,
    render_fts5_any,
)
from service.projects.lexical_parse import IMPLICIT_PREFIX, Leaf, parse_query
from service.projects.lexical_relax import relaxed_terms
from service.projects.lexical_script import SCRIPT_BOUNDARY, script_ngrams
from service.projects.lexical_tokens import (
    STOPWORDS,
    dedupe,
    has_index_token,
    sanitize,
    without_formats,
    word_tokens,
)
from service.projects.lexical_tree import Nothing, normalise, positive_leaves, split_scripts
from service.projects.lexical_tsquery import (
    TSQUERY_MATCH_NOTHING,
    render_script_tsquery,
    render_tsquery,
    render_tsquery_any,
)

__all__ = [
    "CONTENT_COLUMN",
    "FTS5_MATCH_NOTHING",
    "NGRAMS_COLUMN",
    "RELAXED_PREFIX",
    "SCRIPT_BOUNDARY",
    "TSQUERY_MATCH_NOTHING",
    "LexicalQuery",
    "compile_query",
    "relaxed_terms",
    "script_ngrams",
]

# Relaxed terms are exact stems, like the words of the strict form (IMPLICIT_PREFIX).
RELAXED_PREFIX = IMPLICIT_PREFIX


@dataclass(frozen=True)
class LexicalQuery:
    """Compiled forms of one query text for both stores."""

    fts5: str | None
    fts5_relaxed: str | None
    tsquery: str | None
    tsquery_relaxed: str | None
    script_tsquery: str | None
    terms: tuple[str, ...]
    explicit: bool
    # What BM25 sums over (SQLite; PostgreSQL reads the same words back from its tsqueries):
    # each positive word or phrase word and each relaxed term, with whether it is a prefix,
    # and the gram terms of unsegmented scripts.
    score_words: tuple[tuple[str, bool], ...] = ()
    score_grams: tuple[str, ...] = ()
    relaxed_words: tuple[str, ...] = ()  # the terms ORed by the relaxed forms


def _terms(leaves: list[Leaf]) -> tuple[str, ...]:
    tokens = [
        clean
        for leaf in leaves
        for token in word_tokens(leaf.text.lower())
        if (clean := without_formats(token))
    ]
    return tuple(dedupe([token for token in tokens if token not in STOPWORDS] or tokens))


def _score_words(leaves: list[Leaf], relaxed: tuple[str, ...]) -> tuple[tuple[str, bool], ...]:
    words: list[tuple[str, bool]] = []
    for leaf in leaves:
        tokens = word_tokens(leaf.text.lower())
        words += [(token, leaf.prefix and i == len(tokens) - 1) for i, token in enumerate(tokens)]
    content = [word for word in words if word[0] not in STOPWORDS] or words
    content += [(term, RELAXED_PREFIX) for term in relaxed]
    return tuple(dict.fromkeys(word for word in content if has_index_token(word[0])))


def _relaxed(text: str, strict_fts5: str) -> tuple[str | None, str | None]:
    terms = [term for term in relaxed_terms(text) or () if has_index_token(term)]
    if not terms:
        return None, None
    fts5 = render_fts5_any(terms, prefix=RELAXED_PREFIX)
    if fts5 == strict_fts5:
        return None, None
    return fts5, render_tsquery_any(terms, prefix=RELAXED_PREFIX)


def compile_query(text: str) -> LexicalQuery:
    """Compile user text into strict and relaxed FTS5 and tsquery forms; never raises."""
    clean = sanitize(text).strip()
    parsed = parse_query(clean)
    node = normalise(parsed.node)
    if node is None:
        return LexicalQuery(None, None, None, None, None, (), parsed.explicit)
    if isinstance(node, Nothing):
        return LexicalQuery(
            FTS5_MATCH_NOTHING, None, TSQUERY_MATCH_NOTHING, None, None, (), parsed.explicit
        )
    scripted = split_scripts(node)
    fts5 = render_fts5(scripted)
    fts5_relaxed, tsquery_relaxed = (None, None) if parsed.explicit else _relaxed(clean, fts5)
    relaxed = () if fts5_relaxed is None else tuple(relaxed_terms(clean) or ())
    leaves = positive_leaves(scripted.words) if scripted.words is not None else []
    return LexicalQuery(
        fts5=fts5,
        fts5_relaxed=fts5_relaxed,
        tsquery=render_tsquery(scripted.words) if scripted.words is not None else None,
        tsquery_relaxed=tsquery_relaxed,
        script_tsquery=render_script_tsquery(scripted.phrases) if scripted.phrases else None,
        terms=_terms(positive_leaves(node)),
        explicit=parsed.explicit,
        score_words=_score_words(leaves, relaxed),
        score_grams=tuple(dict.fromkeys(gram for grams in scripted.phrases for gram in grams)),
        relaxed_words=relaxed,
    )
