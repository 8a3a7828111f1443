"""HNSW maintenance off the write path.

Inserting one 384-dimensional vector into a pgvector HNSW graph costs ~2 ms of CPU here
(m = 16, ef_construction = 64), which would cap indexing near 400 chunks/s. So writes store
vectors with `ann = false`, and the HNSW index is partial on `ann`: a background task marks
ready vectors of the configured identity `ann = true` in small batches (each UPDATE adds the
row to the graph). Searches that use the HNSW index also scan the (normally tiny) backlog of
unmarked vectors exactly, so results are complete while the index catches up.

One maintainer works at a time across all replicas (a transaction-level advisory lock), and
it sleeps as long as each batch took, so maintenance uses at most half a core of the
database. Maintenance statements are not reported to statement hooks: they belong to no
request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import asyncpg

from service import errors
from service.embeddings.base import EmbeddingIdentity
from service.store.postgres.pool import Database

log = logging.getLogger("search.store.postgres.ann")

# The background loop skips its turn while another replica holds the maintenance lock;
# drain() (tests, benchmarks, operators) waits for it.
_MARK_BATCH = """
WITH turn AS ({turn}),
batch AS (
    SELECT project_id, kind, row_id, chunk_index
    FROM vectors
    WHERE state = 'ready' AND NOT ann AND model = $1 AND dimensions = $2
      AND (SELECT mine FROM turn)
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE vectors AS v SET ann = true
FROM batch AS b
WHERE v.project_id = b.project_id AND v.kind = b.kind AND v.row_id = b.row_id
  AND v.chunk_index = b.chunk_index AND v.model = $1 AND v.dimensions = $2"""
MARK_BATCH_TRY = _MARK_BATCH.format(turn="SELECT pg_try_advisory_xact_lock(7735, 1) AS mine")
MARK_BATCH_WAIT = _MARK_BATCH.format(
    turn="SELECT true AS mine FROM (SELECT pg_advisory_xact_lock(7735, 1)) AS waited"
)
BATCH_SIZE = 64
IDLE_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0


async def mark_batch(
    conn: asyncpg.Connection, identity: EmbeddingIdentity, limit: int, *, wait: bool = False
) -> int:
    """Add up to `limit` backlog vectors of `identity` to its HNSW index; returns how many."""
    sql = MARK_BATCH_WAIT if wait else MARK_BATCH_TRY
    status: str = await conn.execute(sql, identity.model, identity.dimensions, limit)
    return int(status.rsplit(" ", 1)[-1])


class AnnMaintainer:
    """Background task that drains the HNSW backlog of one identity."""

    def __init__(self, db: Database, identity: EmbeddingIdentity) -> None:
        self._db = db
        self._identity = identity
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the background loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="pgvector-ann-maintenance")

    async def stop(self) -> None:
        """Stop the loop and wait for it."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def drain(self, limit: int) -> int:
        """Mark up to `limit` backlog vectors now; returns how many were marked."""
        done = 0
        while done < limit:
            marked = await self._mark(min(BATCH_SIZE * 4, limit - done), wait=True)
            if marked == 0:
                break
            done += marked
        return done

    async def _mark(self, size: int, *, wait: bool = False) -> int:
        async def work(conn: asyncpg.Connection) -> int:
            return await mark_batch(conn, self._identity, size, wait=wait)

        return await self._db.run_unhooked(work)

    async def _loop(self) -> None:
        failures = 0
        while True:
            started = time.monotonic()
            try:
                marked = await self._mark(BATCH_SIZE)
                failures = 0
            except errors.ServiceError as exc:
                failures += 1
                if failures == 1:
                    log.warning("HNSW maintenance paused: %s", exc.message)
                marked = 0
            except Exception:
                failures += 1
                log.exception("HNSW maintenance failed")
                marked = 0
            if marked == 0:
                # Back off while the database is down; poll once a second when idle.
                await asyncio.sleep(min(MAX_BACKOFF_SECONDS, IDLE_SECONDS * 2.0**failures))
                continue
            # Half duty: indexing traffic and searches keep most of the CPU.
            await asyncio.sleep(time.monotonic() - started)
