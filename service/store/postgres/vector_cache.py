"""KNN candidates of the PostgreSQL store from in-process matrices (issue 18).

Past `exact_scan_limit` the vector channel asked the HNSW index for the scope's nearest
chunks: 5-10 ms for a 20k-vector scope of 100k (the graph walks every project's vectors and
drops the other projects'), where one matrix product over the scope's vectors takes ~2 ms
and is exact. The cache keeps, per project, the ready vectors of the store's identity as
one normalised float32 matrix, each with the project's vector generation
(`lexical_stats.vgen`, migration 6, moved by every write that inserts or removes a vector,
in the statement that moves the other statistics) read in the same statement.

The cache only proposes: the search statement receives the candidates and the generations
they were computed from, compares those with the scope's generations in its own snapshot,
and uses the candidates only when all are current (checking each one's state, identity,
source hash, tenant and filters, and computing its similarity from the stored vector);
otherwise it asks the HNSW index as before. So a vector written by another replica, or on
a primary a lagging read replica has not caught up with, is never served from a stale
matrix. The statement reports the generations it saw; projects that moved on are read
again by the next search. Bounded: projects are evicted least recently used past
`budget_bytes`; a scope that does not fit is answered by the index.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.embeddings.base import EmbeddingIdentity
from service.store.base import VectorCacheStats
from service.store.bounded_scan import ScanRows, nearest, row_bytes
from service.store.matrices import MatrixLru, normalised
from service.store.postgres.pool import Reader, cache_read_row

# Every project's chunks and generation, for the start-up read and the refresh after
# writes (which read all of them or none).
SELECT_ALL_SIZES = "SELECT project_id, chunks, vgen FROM lexical_stats ORDER BY project_id"
# The generation and the chunks of each project (its lexical_stats row: no row, 0), read
# before anything is loaded, so a scope that cannot fit is never read.
SELECT_SIZES = """
SELECT p.id AS project_id, COALESCE(s.vgen, 0) AS vgen, COALESCE(s.chunks, 0) AS chunks
FROM unnest($1::bigint[]) AS p(id)
LEFT JOIN lexical_stats AS s ON s.project_id = p.id"""
# One project's ready vectors of the identity and its generation, in one statement (one
# snapshot). The vectors come as one bytea of vector_send() bodies (a 4-byte header: two
# int16, then big-endian float4s), in key order.
SELECT_PROJECT = """
SELECT (SELECT s.vgen FROM lexical_stats AS s WHERE s.project_id = $1) AS vgen,
       COALESCE(array_agg(v.kind ORDER BY v.kind COLLATE "C", v.row_id COLLATE "C",
                          v.chunk_index), '{}') AS kinds,
       COALESCE(array_agg(v.row_id ORDER BY v.kind COLLATE "C", v.row_id COLLATE "C",
                          v.chunk_index), '{}') AS row_ids,
       COALESCE(array_agg(v.chunk_index ORDER BY v.kind COLLATE "C", v.row_id COLLATE "C",
                          v.chunk_index), '{}') AS chunk_indexes,
       COALESCE(string_agg(substring(vector_send(v.embedding) FROM 5), ''::bytea
                           ORDER BY v.kind COLLATE "C", v.row_id COLLATE "C", v.chunk_index),
                ''::bytea) AS vectors
FROM vectors AS v
WHERE v.project_id = $1 AND v.model = $2 AND v.dimensions = $3 AND v.state = 'ready'
  AND vector_dims(v.embedding) = $3"""
ROW_OVERHEAD = 64  # bytes a row costs besides its floats: its key, as Python holds it
# A project is read as one bytea, which PostgreSQL caps at 1 GB: a project whose vectors
# would take more than this is left to the index (~170k 384-d vectors).
MAX_PROJECT_BYTES = 256 << 20
THREAD_ROWS = 4096  # larger products run off the event loop (numpy releases the GIL)
# A matrix used within this many seconds is never evicted to make room: a working set larger
# than the budget would otherwise read projects at every search (measured at 1M chunks with
# a 1 GiB budget: 720 ms a search against 65 ms for HNSW). Scopes that find no room go to
# the index instead.
COLD_SECONDS = 60.0
_SMALL: list[_Matrix] = []  # a scope the exact scan reads whole (compared by identity)


@dataclass(frozen=True)
class _Matrix:
    generation: int
    identity: EmbeddingIdentity
    kinds: list[str]
    row_ids: list[str]
    chunk_indexes: list[int]
    scan: ScanRows  # one normalised vector a row, and its int8 codes

    @property
    def nbytes(self) -> int:
        return self.scan.nbytes + ROW_OVERHEAD * len(self.kinds)


@dataclass(frozen=True)
class Candidates:
    """What the search statement binds: the scope's generations the candidates come from,
    and the candidates' keys, nearest first."""

    project_ids: list[int]
    generations: list[int]
    keys: tuple[list[int], list[str], list[str], list[int]]


class PgVectorCache:
    """Per-project matrices of one store, used from its event loop."""

    def __init__(self, budget_bytes: int) -> None:
        self._lru: MatrixLru[_Matrix] = MatrixLru(budget_bytes)
        self._fallbacks = 0
        self._loading = asyncio.Lock()

    @property
    def enabled(self) -> bool:
        return self._lru.budget > 0

    async def candidates(
        self,
        conn: Reader,
        project_ids: Sequence[int],
        identity: EmbeddingIdentity,
        query: Sequence[float],
        k: int,
        exact_scan_limit: int,
    ) -> Candidates | None:
        """The k nearest ready vectors of the scope (equal distances in identity order: the
        rows are held in that order), with the generations they come from; None when the
        scope has at most `exact_scan_limit` vectors (the statement scans them all) or
        cannot be held at once."""
        scope = sorted({int(p) for p in project_ids})
        matrices = self._held(scope, identity)
        if matrices is None:
            async with self._loading:  # one reader at a time; a second finds it held
                matrices = await self._load(conn, scope, identity, exact_scan_limit)
        if matrices is _SMALL:
            return None
        if matrices is None:
            self._fallbacks += 1
            return None
        probe = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(probe))
        if norm > 0:
            probe = probe / norm
        rows = sum(len(m.kinds) for m in matrices)
        if rows <= exact_scan_limit:
            return None
        if rows > THREAD_ROWS:
            positions = await asyncio.to_thread(_nearest, matrices, probe, k)
        else:
            positions = _nearest(matrices, probe, k)
        return _candidates(scope, matrices, positions)

    async def warm(self, conn: Reader, identity: EmbeddingIdentity) -> int:
        """Read every project's matrix that is missing or older than its project's vectors,
        when all of them fit the budget (a restarted server, or one after a burst of
        writes, then answers its first searches without a load each); none otherwise,
        leaving the least-recently-used order to the searches. Returns the projects read."""
        rows = await conn.fetch(SELECT_ALL_SIZES)
        floats = int(identity.dimensions) * 4
        needed = sum(int(r["chunks"]) for r in rows) * _row_bytes(identity)
        if not rows or needed > self._lru.budget or any(
            int(r["chunks"]) * floats > MAX_PROJECT_BYTES for r in rows
        ):
            return 0
        read = 0
        for row in rows:  # one project at a time: a search may load between two
            project_id = int(row["project_id"])
            async with self._loading:
                held = self._lru.get(project_id)
                current = (int(row["vgen"] or 0), identity)
                if held is not None and (held.generation, held.identity) == current:
                    continue
                if await self._read(conn, project_id, identity) is None:
                    break
                read += 1
        return read

    def observed(self, project_ids: Sequence[int], generations: Sequence[int]) -> None:
        """The generations a statement saw: a matrix of another generation is dropped (read
        again at its next use), and that search counts as a fallback."""
        moved = False
        for project_id, generation in zip(project_ids, generations, strict=True):
            found = self._lru.get(project_id)
            if found is not None and found.generation != generation:
                moved = True
                self._lru.drop(project_id)
        if moved:
            self._fallbacks += 1

    def stats(self) -> VectorCacheStats:
        """What the metrics endpoint shows."""
        return VectorCacheStats(
            len(self._lru), self._lru.bytes, self._lru.budget, self._lru.loads,
            self._lru.evictions, self._fallbacks,
        )

    def _held(self, scope: list[int], identity: EmbeddingIdentity) -> list[_Matrix] | None:
        found = [self._lru.get(p) for p in scope]
        if any(m is None or m.identity != identity for m in found):
            return None
        for project_id in scope:
            self._lru.use(project_id)
        return [m for m in found if m is not None]

    async def _load(
        self, conn: Reader, scope: list[int], identity: EmbeddingIdentity, exact_scan_limit: int
    ) -> list[_Matrix] | None:
        """The scope's matrices, the missing ones read; reading no vector, None when the
        scope cannot be held at once (or holds a project too large to read at once) and
        _SMALL when it has at most `exact_scan_limit` chunks."""
        row_bytes = _row_bytes(identity)
        sizes = await conn.fetch(SELECT_SIZES, scope)
        if sum(int(row["chunks"]) for row in sizes) <= exact_scan_limit:
            return _SMALL
        floats = int(identity.dimensions) * 4
        if any(int(row["chunks"]) * floats > MAX_PROJECT_BYTES for row in sizes):
            return None
        needed = 0
        for row in sizes:
            held = self._lru.get(int(row["project_id"]))
            if held is not None and (held.generation, held.identity) == (row["vgen"], identity):
                needed += held.nbytes
            else:
                needed += int(row["chunks"]) * row_bytes
        if needed > self._lru.budget or not self._room_for(scope, identity, sizes, row_bytes):
            return None
        for project_id in scope:  # held members first out of the eviction order's way
            self._lru.use(project_id)
        matrices = []
        for project_id in scope:
            held = self._lru.get(project_id)
            if held is None or held.identity != identity:
                held = await self._read(conn, project_id, identity)
                if held is None:
                    return None
            self._lru.use(project_id)
            matrices.append(held)
        return matrices

    def _room_for(
        self, scope: list[int], identity: EmbeddingIdentity, sizes: Sequence[Any], row_bytes: int
    ) -> bool:
        """Whether the scope's missing matrices fit beside what is held, evicting only
        matrices outside the scope not used for COLD_SECONDS."""
        missing = sum(
            int(row["chunks"]) * row_bytes for row in sizes
            if (held := self._lru.get(int(row["project_id"]))) is None
            or held.identity != identity
        )
        free = self._lru.budget - self._lru.bytes
        return missing <= free + self._lru.cold_bytes(scope, COLD_SECONDS)

    async def _read(
        self, conn: Reader, project_id: int, identity: EmbeddingIdentity
    ) -> _Matrix | None:
        row = await cache_read_row(
            conn, SELECT_PROJECT, project_id, identity.model, identity.dimensions
        )
        assert row is not None  # an aggregate always returns its row
        dims = int(identity.dimensions)
        kinds, row_ids = list(row["kinds"]), list(row["row_ids"])
        rows = np.frombuffer(row["vectors"], dtype=">f4").astype(np.float32)
        loaded = _Matrix(int(row["vgen"] or 0), identity, kinds, row_ids,
                         [int(i) for i in row["chunk_indexes"]],
                         ScanRows.of(normalised(rows.reshape(len(kinds), dims))))
        return loaded if self._lru.put(project_id, loaded) else None


def _row_bytes(identity: EmbeddingIdentity) -> int:
    """What one row of `identity` costs the cache: its floats, codes and key."""
    return row_bytes(identity.dimensions) + ROW_OVERHEAD


def _nearest(matrices: list[_Matrix], probe: NDArray[np.float32], k: int) -> NDArray[np.intp]:
    return nearest([m.scan for m in matrices], probe, None, k)


def _candidates(
    scope: list[int], matrices: list[_Matrix], positions: NDArray[np.intp]
) -> Candidates:
    starts = np.cumsum([0] + [len(m.kinds) for m in matrices])
    keys: tuple[list[int], list[str], list[str], list[int]] = ([], [], [], [])
    for position in positions.tolist():
        at = int(np.searchsorted(starts, position, side="right")) - 1
        matrix, offset = matrices[at], position - int(starts[at])
        keys[0].append(scope[at])
        keys[1].append(matrix.kinds[offset])
        keys[2].append(matrix.row_ids[offset])
        keys[3].append(matrix.chunk_indexes[offset])
    return Candidates(scope, [m.generation for m in matrices], keys)
