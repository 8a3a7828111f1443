"""The FTS ranking of the SQLite store from in-process postings (issue 18).

The statement's lexical channel reads each query term's postings of the scope from
`term_postings` and sums BM25 in SQL: its cost follows the matches (~1 ms at 100k chunks,
~8 ms at 1M, where a common word holds tens of thousands of scope documents). The cache
holds each project's content-column postings as arrays (service.store.lexical_index) and
ranks a scope in process, with the statement's own arithmetic (`rank(sqlite=True)`: the
same operations in float64, summed as SQLite's SUM sums), so the scores are the SQL path's.

Asked by the statement itself, like the KNN matrices (vector_cache.py): the search statement
calls `search_lexical_rank(...)`, which reads the scope's generations in the statement's own
snapshot (`lexical_generations`, moved by triggers on every change of `lexical_stats`, which
every write of a document's postings makes in its transaction: migration 6), reads again
the projects that moved on, and ranks. What it ranks is therefore what the statement sees;
there is nothing to check afterwards. It answers NULL when the scope does not fit the budget
(the store then ranks in SQL with a second statement).

Used for FTS and for HYBRID fused by SUM or RRF, without filters, when every query term is a
content-column term and membership is counted (the strict form is the AND of the relaxed
form's terms: FTS_TIERED_FROM_HITS); other shapes (phrases, NOT, script n-grams, filters,
MAX_MIN) keep the SQL ranking.
"""

from __future__ import annotations

import itertools
import json
import threading
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import apsw
import numpy as np
from numpy.typing import NDArray

from service.store.lexical_index import LexicalCacheStats, ProjectPostings, Term, rank
from service.store.matrices import MatrixLru
from service.store.sqlite.connection import unhooked

SELECT_GENERATIONS = """
SELECT s.project_id, s.n, s.sum_dl, COALESCE(g.gen, 0)
FROM lexical_stats AS s LEFT JOIN lexical_generations AS g ON g.project_id = s.project_id
WHERE s.project_id IN (SELECT value FROM json_each(?))"""
# Documents in identity order (kind, row id: BINARY collation, the byte order the page uses).
SELECT_DOCUMENTS = """
SELECT id, kind, row_id FROM documents WHERE project_id = ? ORDER BY kind, row_id"""
# The content column's postings by term (byte order), then document id: the key's order, so
# the ORDER BY costs no sort.
SELECT_POSTINGS = """
SELECT term, doc_id, tf, dl FROM term_postings WHERE project_id = ? AND col = 0
ORDER BY term, doc_id"""
SELECT_ALL_GENERATIONS = """
SELECT s.project_id, s.n, s.sum_dl, COALESCE(g.gen, 0)
FROM lexical_stats AS s LEFT JOIN lexical_generations AS g ON g.project_id = s.project_id"""
MAX_TF = 65_535  # tfs are held as uint16


@dataclass(frozen=True)
class _Held:
    postings: ProjectPostings
    ids: NDArray[np.int64]  # documents.id of each document index
    by_id: NDArray[np.int64]  # the document indexes in ascending id order
    sorted_ids: NDArray[np.int64]  # ids[by_id]

    @property
    def nbytes(self) -> int:
        return int(self.postings.nbytes + self.ids.nbytes + self.by_id.nbytes
                   + self.sorted_ids.nbytes)


def _positions(held: Sequence[_Held], doc_ids: Sequence[int]) -> list[tuple[int, int]]:
    """(scope position, document index) of each of `doc_ids` the scope holds."""
    wanted = np.unique(np.asarray(doc_ids, dtype=np.int64))
    found: list[tuple[int, int]] = []
    for position, item in enumerate(held):
        ordered = item.sorted_ids
        at = np.searchsorted(ordered, wanted)
        inside = at < len(ordered)
        at = at[inside]
        hit = ordered[at] == wanted[inside]
        found.extend((position, int(d)) for d in item.by_id[at[hit]].tolist())
    return found


@dataclass(frozen=True)
class LexicalRanking:
    """The first rows of a scope's lexical list and what the page reports of the whole."""

    doc_ids: list[int]
    scores: list[float]
    tiers: list[int]
    ranks: list[int]  # 1-based places in the whole list
    total: int
    relaxed: bool


class SqliteLexicalCache:
    """Per-project postings shared by the reader threads of one store."""

    def __init__(self, budget_bytes: int) -> None:
        self._lru: MatrixLru[_Held] = MatrixLru(budget_bytes)
        self._lock = threading.Lock()
        self._served = 0
        self._fallbacks = 0

    @property
    def enabled(self) -> bool:
        return self._lru.budget > 0

    def rank(
        self,
        conn: apsw.Connection,
        project_ids: Sequence[int],
        terms: Sequence[Term],
        k1: float,
        b: float,
        strict_at: int,
        any_term: bool,
        wanted: int,
        also: Sequence[int] = (),
        by_score: bool = False,
    ) -> LexicalRanking | None:
        """The scope's first `wanted` documents holding a term (every one when not
        `any_term`; tier 1: holding `strict_at` of them; `by_score`: the first by score
        alone), as of `conn`'s current snapshot; None when the scope cannot be held."""
        scope = sorted({int(p) for p in project_ids})
        held = self._scope(conn, scope)
        if held is None:
            with self._lock:
                self._fallbacks += 1
            return None
        postings = [item.postings for item in held]
        extra = _positions(held, also) if also else []
        ranking = rank(
            postings, list(terms), k1, b, strict_at, any_term, wanted, extra, sqlite=True,
            by_score=by_score,
        )
        doc_ids = [
            int(held[p].ids[d])
            for p, d in zip(ranking.positions.tolist(), ranking.documents.tolist(), strict=True)
        ]
        with self._lock:
            self._served += 1
        return LexicalRanking(
            doc_ids, ranking.scores.tolist(), ranking.tiers.tolist(), ranking.ranks.tolist(),
            ranking.total, ranking.relaxed,
        )

    def warm(self, conn: apsw.Connection) -> int:
        """Read every project's postings while they fit the budget (a restarted server then
        answers its first searches without a read each); returns the projects read."""
        conn.execute("BEGIN")  # the generations and postings of one snapshot
        try:
            read, evictions = 0, self._lru.evictions
            for project_id, current in _generations(conn.execute(SELECT_ALL_GENERATIONS)).items():
                with self._lock:
                    found = self._lru.get(project_id)
                if found is not None and _key(found) == current:
                    continue
                if self._read(conn, project_id, current) is None:
                    break
                if self._lru.evictions > evictions:
                    break  # full: the searches choose what stays
                read += 1
            return read
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def stats(self) -> LexicalCacheStats:
        """What the metrics endpoint shows."""
        with self._lock:
            return LexicalCacheStats(
                len(self._lru), self._lru.bytes, self._lru.budget, self._lru.loads,
                self._lru.evictions, self._served, self._fallbacks,
            )

    def _scope(self, conn: apsw.Connection, scope: list[int]) -> list[_Held] | None:
        current = _generations(conn.execute(SELECT_GENERATIONS, (json.dumps(scope),)))
        held: dict[int, _Held] = {}
        with self._lock:
            for project_id in scope:
                found = self._lru.get(project_id)
                if found is not None and _key(found) == current.get(project_id, _EMPTY):
                    held[project_id] = found
                    self._lru.use(project_id)
        out = []
        for project_id in scope:
            item = held.get(project_id) or self._read(
                conn, project_id, current.get(project_id, _EMPTY)
            )
            if item is None:
                return None
            out.append(item)
        with self._lock:
            if any(self._lru.get(p) is None for p in scope):
                return None  # the scope pushed part of itself out: it does not fit
        return out

    def _read(
        self, conn: apsw.Connection, project_id: int, current: tuple[int, int, int]
    ) -> _Held | None:
        """Read one project's postings and hold them, evicting least recently used ones."""
        loaded = _load(conn, project_id, current)
        if loaded is None:
            return None
        with self._lock:
            return loaded if self._lru.put(project_id, loaded) else None


_EMPTY = (0, 0, 0)


def _generations(rows: Iterable[tuple[apsw.SQLiteValue, ...]]) -> dict[int, tuple[int, int, int]]:
    """Each project's (N, summed lengths, generation) as the snapshot holds them (a project
    without statistics is absent: nothing written, nothing to rank)."""
    return {
        int(cast(int, p)): (int(cast(int, n)), int(cast(int, s)), int(cast(int, g)))
        for p, n, s, g in rows
    }


def _key(held: _Held) -> tuple[int, int, int]:
    return held.postings.n, held.postings.sum_dl, held.postings.generation


def _load(
    conn: apsw.Connection, project_id: int, current: tuple[int, int, int]
) -> _Held | None:
    n, sum_dl, generation = current
    documents = conn.execute(SELECT_DOCUMENTS, (project_id,)).fetchall()
    ids = np.fromiter((int(cast(int, r[0])) for r in documents), dtype=np.int64,
                      count=len(documents))
    kinds = [str(r[1]) for r in documents]
    row_ids = [str(r[2]) for r in documents]
    order = np.argsort(ids)
    sorted_ids = ids[order]
    rows = conn.execute(SELECT_POSTINGS, (project_id,)).fetchall()
    count = len(rows)
    terms = [cast(str, r[0]) for r in rows]
    numbers = np.fromiter(
        itertools.chain.from_iterable((r[1], r[2], r[3]) for r in rows),
        dtype=np.int64, count=3 * count,
    ).reshape(count, 3) if count else np.zeros((0, 3), dtype=np.int64)
    if count and int(numbers[:, 1].max()) > MAX_TF:
        return None
    found = np.searchsorted(sorted_ids, numbers[:, 0])
    known = found < len(sorted_ids)
    known[known] = sorted_ids[found[known]] == numbers[known, 0]
    if not bool(known.all()):
        return None  # a posting of no document of the project: not written by this service
    documents_at = order[found].astype(np.int32)
    # Vocabulary in byte order (the key's order; Python orders str by code point, the same).
    vocabulary: list[str] = []
    counts: list[int] = []
    for term, group in itertools.groupby(terms):
        vocabulary.append(term)
        counts.append(len(list(group)))
    starts = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts, dtype=np.int64)])
    term_of = np.repeat(np.arange(len(vocabulary), dtype=np.int64), counts)
    by = np.lexsort((documents_at, term_of))  # each lexeme's documents in identity order
    lengths = np.zeros(len(ids), dtype=np.float64)
    lengths[documents_at] = numbers[:, 2]
    postings = ProjectPostings(
        generation=generation,
        n=n,
        sum_dl=sum_dl,
        kinds=kinds,
        row_ids=row_ids,
        lengths=lengths,
        vocabulary=vocabulary,
        starts=starts,
        docs=documents_at[by],
        tfs=numbers[by, 1].astype(np.uint16),
    )
    return _Held(postings, ids, order.astype(np.int64), sorted_ids)


_FUNCTIONS: weakref.WeakKeyDictionary[apsw.Connection, SqliteLexicalCache] = (
    weakref.WeakKeyDictionary()
)
# The scores of the connection's last ranking (None: its last call could not rank).
_SCORES: weakref.WeakKeyDictionary[apsw.Connection, tuple[int, list[float] | None]] = (
    weakref.WeakKeyDictionary()
)
_TOKENS = itertools.count(1)


def forget_lexical(conn: apsw.Connection) -> None:
    """Before a statement: no ranking asked on `conn` yet."""
    _SCORES.pop(conn, None)


def lexical_refused(conn: apsw.Connection) -> bool:
    """After a statement that asked for a ranking: whether the cache could not give one."""
    held = _SCORES.get(conn)
    return held is None or held[1] is None


def register_lexical_functions(conn: apsw.Connection, cache: SqliteLexicalCache) -> None:
    """`search_lexical_rank(scope, terms, k1, b, strict_at, any_term, wanted, also,
    by_score)` and
    `search_lexical_score(token, i)` on `conn`, answered from `cache`.

    The first returns the ranking as JSON (`{"token", "rows": [[doc id, tier], ...], "total",
    "relaxed"}`; NULL when the scope cannot be held) and keeps its scores for the second,
    which returns the i-th as a REAL (JSON text would round-trip doubles through SQLite's
    text conversion). Their own reads are the statement's inner work, kept out of the
    statement hooks. Once per connection and cache."""
    if _FUNCTIONS.get(conn) is cache:
        return

    def ranking(*args: apsw.SQLiteValue) -> str | None:
        scope, terms, k1, b, strict_at, any_term, wanted, also, by_score = args
        parsed = [Term(str(t[0]), bool(t[1])) for t in json.loads(str(terms))]
        others = [int(d) for d in json.loads(str(also))] if also is not None else []
        found = unhooked(
            conn,
            lambda: cache.rank(
                conn, json.loads(str(scope)), parsed, float(cast(float, k1)),
                float(cast(float, b)), int(cast(int, strict_at)), bool(any_term),
                int(cast(int, wanted)), others, bool(by_score),
            )
        )
        if found is None:
            _SCORES[conn] = (0, None)
            return None
        token = next(_TOKENS)
        _SCORES[conn] = (token, found.scores)
        rows = [
            [d, t, r] for d, t, r in zip(found.doc_ids, found.tiers, found.ranks, strict=True)
        ]
        return json.dumps(
            {"token": token, "rows": rows, "total": found.total, "relaxed": int(found.relaxed)}
        )

    def score(*args: apsw.SQLiteValue) -> float:
        token, index = int(cast(int, args[0])), int(cast(int, args[1]))
        held = _SCORES.get(conn)
        if held is None or held[1] is None or held[0] != token:
            raise ValueError("search_lexical_score: no such ranking on this connection")
        return held[1][index]

    conn.create_scalar_function("search_lexical_rank", ranking, 9)
    conn.create_scalar_function("search_lexical_score", score, 2)
    _FUNCTIONS[conn] = cache


__all__ = [
    "LexicalRanking",
    "SqliteLexicalCache",
    "register_lexical_functions",
]
