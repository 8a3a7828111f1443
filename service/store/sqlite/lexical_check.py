"""FTS5 syntax checks on a private in-memory table, so a typed query never errors later."""

from __future__ import annotations

import threading

import apsw

CREATE_PROBE = """
CREATE VIRTUAL TABLE docs_fts USING fts5(
    content, ngrams, tokenize = 'porter unicode61 remove_diacritics 2'
)"""
PROBE = "SELECT COUNT(*) FROM docs_fts WHERE docs_fts MATCH ?"
_CACHE_LIMIT = 4096


class Fts5Checker:
    """Answers whether an expression parses as FTS5 MATCH syntax for our columns."""

    def __init__(self) -> None:
        self._conn = apsw.Connection(":memory:")
        self._conn.execute(CREATE_PROBE)
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

    def close(self) -> None:
        """Release the in-memory connection."""
        self._conn.close()
