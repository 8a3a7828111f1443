"""FTS5 helpers: syntax checks on a private in-memory table, query stemming, and what the
BM25 fragments read on each connection (`temp.docs_fts_instance`, metadata functions)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import cast

import apsw

from service.store.sqlite.filters import contains_all, metadata_in

TOKENIZER = ("porter", ("unicode61", "remove_diacritics", "2"))
CREATE_PROBE = """
CREATE VIRTUAL TABLE docs_fts USING fts5(
    content, ngrams, tokenize = 'porter unicode61 remove_diacritics 2'
)"""
PROBE = "SELECT COUNT(*) FROM docs_fts WHERE docs_fts MATCH ?"
# One row per token occurrence (term, doc, col, offset), read straight from the index: term
# frequencies for BM25 without a function call per row. A temp table of the connection: it
# stores nothing, and reader connections (query_only) may still create it.
CREATE_INSTANCES = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.docs_fts_instance"
    " USING fts5vocab(main, docs_fts, instance)"
)
_CACHE_LIMIT = 4096
_REGISTERED: weakref.WeakSet[apsw.Connection] = weakref.WeakSet()


def register_functions(conn: apsw.Connection) -> None:
    """Make the search statement's index view and functions (`contains_all`, `in`) available
    on `conn` (once per connection)."""
    if conn in _REGISTERED:
        return
    conn.create_scalar_function("search_contains_all", contains_all, 2, deterministic=True)
    conn.create_scalar_function("search_metadata_in", metadata_in, 4, deterministic=True)
    # Once per connection, not per search: kept out of the statement hooks, which count a
    # search's statements.
    tracer, conn.exec_trace = conn.exec_trace, None
    query_only = bool(conn.execute("PRAGMA query_only").fetchall()[0][0])
    try:
        if query_only:
            conn.execute("PRAGMA query_only = OFF")
        conn.execute(CREATE_INSTANCES)
    finally:
        if query_only:
            conn.execute("PRAGMA query_only = ON")
        conn.exec_trace = tracer
    _REGISTERED.add(conn)


class Fts5Checker:
    """Answers whether an expression parses as FTS5 MATCH syntax for our columns."""

    def __init__(self) -> None:
        self._conn = apsw.Connection(":memory:")
        self._conn.execute(CREATE_PROBE)
        self._tokenizer = self._conn.fts5_tokenizer(TOKENIZER[0], list(TOKENIZER[1]))
        self._lock = threading.Lock()
        self._cache: dict[str, bool] = {}

    def valid(self, expression: str) -> bool:
        """True when `expression` parses (syntax does not depend on the data)."""
        with self._lock:
            known = self._cache.get(expression)
            if known is not None:
                return known
            try:
                self._conn.execute(PROBE, (expression,)).fetchall()
                ok = True
            except apsw.Error:
                ok = False
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[expression] = ok
            return ok

    def stems(self, word: str, prefix: bool) -> list[str]:
        """The index terms the tokenizer makes of `word` in a query (a prefix query if asked)."""
        flags = apsw.FTS5_TOKENIZE_QUERY | (apsw.FTS5_TOKENIZE_PREFIX if prefix else 0)
        with self._lock:
            tokens = self._tokenizer(word.encode(), flags, None)
        return [cast("str", tuple(token)[2]) for token in tokens]

    def index_terms(self, words: Sequence[tuple[str, bool]]) -> list[tuple[str, bool]]:
        """The index terms (the tokenizer's stems) of `words`, each once, in order."""
        terms = [(stem, prefix) for word, prefix in words for stem in self.stems(word, prefix)]
        return list(dict.fromkeys(terms))

    def close(self) -> None:
        """Release the in-memory connection."""
        self._conn.close()
