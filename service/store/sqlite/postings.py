"""The lexical channel's own postings: one row per (project, column, term, document).

FTS5 answers MATCH over the whole table, but BM25 over a scope needs each query term's
frequency in each scope document, the document's length and the scope's statistics. Read
from FTS5 (`fts5vocab instance`: one row per token occurrence, every project's) plus the
documents table (whose lengths sit behind the body's overflow pages), that cost followed
the whole table's occurrences: ~25 ms for a 3-word query at 100k chunks, most of it reading
documents. `term_postings` is keyed by project first and carries the term frequency and the
document length, so the statement reads only the scope's postings of the query's terms, in
index order, and touches no document row; `lexical_stats` keeps each project's document
count and summed lengths, so an unfiltered scope's N and avgdl are a few rows.

Both are written in the transaction that writes the document (and its FTS5 row), from the
same tokenizer FTS5 uses, so they never disagree with the index (tests/store compare them).
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterable
from typing import Any

import apsw

from service.projects.lexical_fts5 import CONTENT_COLUMN, NGRAMS_COLUMN
from service.store.sqlite.lexical_check import TOKENIZER  # docs_fts's tokenize option

# Column numbers in term_postings (the FTS5 column names cost bytes in every row).
COLUMN_NUMBERS = {CONTENT_COLUMN: 0, NGRAMS_COLUMN: 1}

# Like every statement keyed by a project id (writes.py, issue #8), each carries the tenant
# and checks it itself: `?7` / `:tenant` is the owner.
OWNED = "EXISTS (SELECT 1 FROM projects WHERE project_id = ?1 AND tenant = ?7)"
INSERT_POSTING = f"""
INSERT INTO term_postings (project_id, col, term, doc_id, tf, dl)
SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE {OWNED}"""
OWNED_NAMED = "EXISTS (SELECT 1 FROM projects WHERE project_id = :project_id AND tenant = :tenant)"
# INDEXED BY: without ANALYZE statistics SQLite prefers the key's project_id prefix, which
# scans every posting of the project (35 ms per updated document at 3k documents).
DELETE_DOCUMENT_POSTINGS = f"""
DELETE FROM term_postings INDEXED BY term_postings_doc
WHERE project_id = :project_id AND doc_id = :doc_id AND {OWNED_NAMED}"""  # noqa: S608
DELETE_PROJECT_POSTINGS = (
    f"DELETE FROM term_postings WHERE project_id = :project_id AND {OWNED_NAMED}"  # noqa: S608
)
DELETE_PROJECT_STATS = f"DELETE FROM lexical_stats WHERE project_id = :project_id AND {OWNED_NAMED}"  # noqa: S608
# n, sum_dl and sum_nl move by the difference a write makes to one document.
ADD_STATS = f"""
INSERT INTO lexical_stats (project_id, n, sum_dl, sum_nl)
SELECT :project_id, :n, :sum_dl, :sum_nl WHERE {OWNED_NAMED}
ON CONFLICT (project_id) DO UPDATE SET
    n = n + excluded.n, sum_dl = sum_dl + excluded.sum_dl, sum_nl = sum_nl + excluded.sum_nl"""
# The migration's backfill (no tenant to check: it writes every project's rows).
BACKFILL_POSTING = """
INSERT INTO term_postings (project_id, col, term, doc_id, tf, dl) VALUES (?, ?, ?, ?, ?, ?)"""


def indexed_content(title: str, path: str, body: str) -> str:
    """The text of a document's FTS5 `content` column (and of its content postings)."""
    return f"{title}\n{path}\n{body}"


class Postings:
    """Turns a document's indexed text into postings with FTS5's own tokenizer."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._tokenize = conn.fts5_tokenizer(TOKENIZER[0], list(TOKENIZER[1]))

    def terms(self, text: str) -> Counter[str]:
        """Each index term of `text` (as FTS5 stores it for a document) and its frequency."""
        if not text:
            return Counter()
        tokens = self._tokenize(
            text.encode(),
            apsw.FTS5_TOKENIZE_DOCUMENT,
            None,
            include_offsets=False,
            include_colocated=False,
        )
        return Counter(str(token) for token in tokens)

    def rows(
        self, project_id: int, doc_id: int, content: str, ngrams: str, lengths: tuple[int, int]
    ) -> Iterable[tuple[int, int, str, int, int, int]]:
        """term_postings rows of one document; `lengths` = (doc_len, ngram_len)."""
        for column, text, length in (
            (COLUMN_NUMBERS[CONTENT_COLUMN], content, lengths[0]),
            (COLUMN_NUMBERS[NGRAMS_COLUMN], ngrams, lengths[1]),
        ):
            for term, tf in sorted(self.terms(text).items()):  # key order: fewer page moves
                yield project_id, column, term, doc_id, tf, length


_BY_CONNECTION: weakref.WeakKeyDictionary[apsw.Connection, Postings] = weakref.WeakKeyDictionary()


def postings_of(conn: apsw.Connection) -> Postings:
    """The connection's tokenizer (made once per connection: the writer's, a migration's)."""
    found = _BY_CONNECTION.get(conn)
    if found is None:
        found = _BY_CONNECTION[conn] = Postings(conn)
    return found


Row = tuple[int, int, str, int, int, int]


class Batch:
    """The postings one write transaction adds, inserted together in key order at `flush`.

    Sorted, a batch's postings of one term land next to each other in the index (~10-30%
    less CPU than inserting document by document). A document written twice in one batch
    keeps only its last postings: removing it drops the queued ones too. `owner` holds the
    `project_id` and `tenant` every statement checks."""

    def __init__(self, conn: apsw.Connection, owner: dict[str, Any]) -> None:
        self._conn = conn
        self._owner = owner
        self._postings = postings_of(conn)
        self._queued: dict[int, list[Row]] = {}

    def add(self, doc_id: int, texts: tuple[str, str], lengths: tuple[int, int]) -> None:
        """Queue a written document's postings and count it in its project's statistics."""
        project_id = int(self._owner["project_id"])
        self._queued[doc_id] = list(self._postings.rows(project_id, doc_id, *texts, lengths))
        self._stats(1, lengths)

    def remove(self, doc_id: int, lengths: tuple[int, int]) -> None:
        """Forget a document's postings and take it out of its project's statistics."""
        self._queued.pop(doc_id, None)
        self._conn.execute(DELETE_DOCUMENT_POSTINGS, {**self._owner, "doc_id": doc_id})
        self._stats(-1, (-lengths[0], -lengths[1]))

    def flush(self) -> None:
        """Insert what is queued (before the transaction commits)."""
        rows = sorted(row for queued in self._queued.values() for row in queued)
        self._queued.clear()
        tenant = self._owner["tenant"]
        self._conn.executemany(INSERT_POSTING, [(*row, tenant) for row in rows])

    def _stats(self, n: int, lengths: tuple[int, int]) -> None:
        self._conn.execute(
            ADD_STATS, {**self._owner, "n": n, "sum_dl": lengths[0], "sum_nl": lengths[1]}
        )


def remove_project(conn: apsw.Connection, owner: dict[str, Any]) -> None:
    """Forget every posting and the statistics of a project."""
    conn.execute(DELETE_PROJECT_POSTINGS, owner)
    conn.execute(DELETE_PROJECT_STATS, owner)
