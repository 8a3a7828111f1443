"""The KNN candidates of the SQLite store from in-process matrices (issue 18).

sqlite-vec's vec0 scans a partition with scalar code: ~0.6 us a 384-d vector, 12-16 ms for
a 20k-chunk scope, where one matrix product over the same vectors takes ~2-3 ms. The cache
keeps, per project, the ready vectors of the store's identity as one normalised float32
matrix, and answers "the k nearest chunks of the scope" from it. (vec0 answers the k nearest
of each project partition: ten times the rows to check again for a scope of ten projects,
and never a better page: the page's documents are the first ones the scope's own nearest
chunks reach.)

Kept current by generations, never by guesses: every change to a project's rows of
`vectors` bumps `vector_generations` (triggers, migration 5; whoever writes, in whatever
process), and each search reads the scope's generations in the same read transaction as
its statement, reloading the projects that moved on. The cache only proposes candidates:
the statement still checks each one (state, identity, source hash, tenant, filters) and
computes its similarity from the stored vector, exactly as on the exact path. Bounded:
projects are evicted least recently used past `budget_bytes`; a scope larger than the
budget gets no answer and the statement asks vec0 instead.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import apsw
import numpy as np
from numpy.typing import NDArray

from service.embeddings.base import EmbeddingIdentity
from service.store.base import VectorCacheStats
from service.store.bounded_scan import ScanRows, nearest, row_bytes, take
from service.store.matrices import MatrixLru, normalised
from service.store.sqlite.connection import unhooked

SELECT_GENERATIONS = """
SELECT project_id, gen FROM vector_generations
WHERE project_id IN (SELECT value FROM json_each(?))"""
# The rows vec_chunks mirrors (ready, this identity); the source hash is the statement's check.
# In index order, put in identity order by _load. ~4 us a row (each 1.5 kB row is a page
# read): a 2k-vector project ~8 ms, what a first search pays.
SELECT_PROJECT_VECTORS = """
SELECT chunk_id, embedding FROM vectors
WHERE project_id = ? AND model = ? AND dimensions = ? AND state = 'ready'"""
# The project's chunks in document identity order, the order the statement breaks equal
# similarities by: two covering indexes (documents' and chunks' unique keys), no table row
# read; ~0.5 us a chunk, an eighth of the vectors' read. Kept apart from it: reading the
# vectors themselves in this order (one join) reads their pages out of file order, 330-350
# ms for a 20k-vector project not in the page cache against 135-320 ms for the two reads
# (1M-chunk file; the same ~27 ms both ways once cached).
SELECT_PROJECT_CHUNK_ORDER = """
SELECT c.id FROM documents AS d
CROSS JOIN chunks AS c ON c.project_id = d.project_id AND c.document_id = d.id
WHERE d.project_id = ?
ORDER BY d.kind, d.row_id, c.chunk_index"""
# The covering index vectors_identity alone: what a project would take before it is read.
COUNT_PROJECT_VECTORS = """
SELECT count(*) FROM vectors
WHERE project_id = ? AND model = ? AND dimensions = ? AND state = 'ready'"""
SELECT_GENERATION_PROJECTS = "SELECT project_id FROM vector_generations"


@dataclass(frozen=True)
class _Matrix:
    generation: int
    identity: EmbeddingIdentity
    ids: NDArray[np.int64]
    scan: ScanRows  # one normalised vector a row, and its int8 codes

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes) + self.scan.nbytes


class VectorCache:
    """Per-project matrices shared by the reader threads of one store."""

    def __init__(self, budget_bytes: int) -> None:
        self._lru: MatrixLru[_Matrix] = MatrixLru(budget_bytes)
        self._lock = threading.Lock()
        self._fallbacks = 0

    @property
    def enabled(self) -> bool:
        return self._lru.budget > 0

    def scope_count(
        self, conn: apsw.Connection, project_ids: Sequence[int], identity: EmbeddingIdentity
    ) -> int | None:
        """Ready vectors of `identity` in the scope, as of `conn`'s current snapshot (the
        matrices brought up to date); None when they cannot be held at once."""
        matrices = self._scope(conn, project_ids, identity)
        return None if matrices is None else sum(len(m.ids) for m in matrices)

    def nearest_ids(
        self,
        conn: apsw.Connection,
        project_ids: Sequence[int],
        identity: EmbeddingIdentity,
        query: NDArray[np.float32],
        k: int,
    ) -> list[int] | None:
        """The chunk ids of the k nearest ready vectors of the scope, nearest first (equal
        distances in identity order: the rows are held in that order); None when the scope
        cannot be held at once."""
        matrices = self._scope(conn, project_ids, identity, for_knn=True)
        if matrices is None:
            return None
        norm = float(np.linalg.norm(query))
        probe = query / norm if norm > 0 else query
        if not matrices:
            return []
        ids = [m.ids for m in matrices]
        positions = nearest([m.scan for m in matrices], probe, None, k)
        found: list[int] = take(ids, positions).tolist()
        return found

    def _scope(
        self,
        conn: apsw.Connection,
        project_ids: Sequence[int],
        identity: EmbeddingIdentity,
        *,
        for_knn: bool = False,
    ) -> list[_Matrix] | None:
        """The scope's matrices, each current; None, reading nothing, when they cannot be
        held at once (what a project not held yet would take is counted from the index
        first: reading a scope only to drop it would cost every search a full read)."""
        scope = sorted({int(p) for p in project_ids})
        generations = {
            int(p): int(g) for p, g in conn.execute(SELECT_GENERATIONS, (json.dumps(scope),))
        }
        held: dict[int, _Matrix] = {}
        with self._lock:
            for project_id in scope:
                found = self._lru.get(project_id)
                current = (generations.get(project_id, 0), identity)
                if found is not None and (found.generation, found.identity) == current:
                    held[project_id] = found
                    self._lru.use(project_id)
        per_row = row_bytes(identity.dimensions) + 8  # and its id
        needed = sum(m.nbytes for m in held.values())
        for project_id in scope:
            if project_id not in held:
                row = conn.execute(
                    COUNT_PROJECT_VECTORS, (project_id, identity.model, identity.dimensions)
                ).fetchall()[0]
                needed += int(cast(int, row[0])) * per_row
        if needed > self._lru.budget:
            if for_knn:  # one fallback per search: the one whose candidates vec0 gives
                with self._lock:
                    self._fallbacks += 1
            return None
        matrices = []
        for project_id in scope:
            matrix = held.get(project_id) or self._read(
                conn, project_id, generations.get(project_id, 0), identity
            )
            if matrix is None:  # the count said it fits; kept as the budget's guard
                return None
            matrices.append(matrix)
        return matrices

    def _read(
        self, conn: apsw.Connection, project_id: int, generation: int, identity: EmbeddingIdentity
    ) -> _Matrix | None:
        """Read one project's matrix and hold it, evicting least recently used ones."""
        loaded = _load(conn, project_id, generation, identity)
        with self._lock:
            return loaded if self._lru.put(project_id, loaded) else None

    def warm(self, conn: apsw.Connection, identity: EmbeddingIdentity) -> int:
        """Read every project's matrix when all of them fit the budget (a restarted server
        then answers its first searches without a load each); none otherwise, leaving the
        least-recently-used order to the searches. Returns the projects read."""
        conn.execute("BEGIN")  # the counts and generations of one snapshot
        try:
            projects = [int(cast(int, p)) for (p,) in conn.execute(SELECT_GENERATION_PROJECTS)]
            matrices = self._scope(conn, projects, identity)
            return 0 if matrices is None else len(matrices)
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def stats(self) -> VectorCacheStats:
        """What the metrics endpoint shows."""
        with self._lock:
            return VectorCacheStats(
                len(self._lru),
                self._lru.bytes,
                self._lru.budget,
                self._lru.loads,
                self._lru.evictions,
                self._fallbacks,
            )


def _load(
    conn: apsw.Connection, project_id: int, generation: int, identity: EmbeddingIdentity
) -> _Matrix:
    dims = int(identity.dimensions)
    # A blob of another length than the identity's (only a writer behind the store's back
    # makes one) is never a candidate.
    rows = [
        (cast(int, chunk_id), blob)
        for chunk_id, blob in conn.execute(
            SELECT_PROJECT_VECTORS, (project_id, identity.model, identity.dimensions)
        )
        if isinstance(blob, bytes) and len(blob) == dims * 4
    ]
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
    order = _identity_order(conn, project_id, ids)
    matrix = normalised(matrix.reshape(len(rows), dims)[order])
    return _Matrix(generation, identity, ids[order], ScanRows.of(matrix))


def _identity_order(
    conn: apsw.Connection, project_id: int, ids: NDArray[np.int64]
) -> NDArray[np.intp]:
    """The permutation that puts the chunk `ids` in document identity order (a chunk
    without a document, only a writer behind the store's back makes one, last)."""
    ordered = np.fromiter(
        (cast(int, r[0]) for r in conn.execute(SELECT_PROJECT_CHUNK_ORDER, (project_id,))),
        dtype=np.int64,
    )
    by_id = np.argsort(ordered)
    at = np.minimum(np.searchsorted(ordered, ids, sorter=by_id), max(len(ordered) - 1, 0))
    rank = np.full(len(ids), len(ordered), dtype=np.int64)
    if len(ordered):
        found = ordered[by_id[at]] == ids
        rank[found] = by_id[at][found]
    return np.argsort(rank, kind="stable")


_FUNCTIONS: weakref.WeakKeyDictionary[apsw.Connection, VectorCache] = weakref.WeakKeyDictionary()


def register_cache_functions(conn: apsw.Connection, cache: VectorCache) -> None:
    """`search_cached_vector_count(scope, model, dimensions)` and `search_cached_knn(query,
    scope, model, dimensions, k)` on `conn`, answered from `cache` (NULL when it cannot hold
    the scope): the search statement asks them, so the cache is read in the statement's own
    snapshot and a search stays one statement. Their own reads (generations, a project's
    vectors) are the statement's inner work, like FTS5's and vec0's, and are kept out of the
    statement hooks. Once per connection and cache."""
    if _FUNCTIONS.get(conn) is cache:
        return

    def count(*args: apsw.SQLiteValue) -> int | None:
        scope, model, dimensions = args
        identity = EmbeddingIdentity(str(model), int(cast(int, dimensions)))
        return unhooked(conn, lambda: cache.scope_count(conn, json.loads(str(scope)), identity))

    def knn(*args: apsw.SQLiteValue) -> str | None:
        query, scope, model, dimensions, k = args
        identity = EmbeddingIdentity(str(model), int(cast(int, dimensions)))
        probe = np.frombuffer(cast(bytes, query), dtype=np.float32)
        found = unhooked(
            conn,
            lambda: cache.nearest_ids(
                conn, json.loads(str(scope)), identity, probe, int(cast(int, k))
            )
        )
        return None if found is None else "[" + ",".join(map(str, found)) + "]"

    conn.create_scalar_function("search_cached_vector_count", count, 3)
    conn.create_scalar_function("search_cached_knn", knn, 5)
    _FUNCTIONS[conn] = cache
