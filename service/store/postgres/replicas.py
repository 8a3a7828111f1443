"""Read replicas: searches go to a streaming replica that is up and caught up enough.

A background task checks every replica each `interval` seconds: its replay position and
how far behind the primary it is. A search runs on the next eligible replica (round-robin)
and falls back to the primary when none is eligible or the replica fails mid-statement.

Read-your-writes: writes record the primary's WAL position (after their commit) in the
call's `WriteLsn`, which the gRPC layer returns as `x-search-lsn`; a search bound to a
minimum LSN (`x-search-min-lsn`) uses only replicas whose replay position has reached it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from service import errors
from service.store.postgres.pool import Conn, Database, PoolSettings

T = TypeVar("T")
log = logging.getLogger("search.replicas")

PRIMARY_POSITION = "SELECT pg_current_wal_flush_lsn()::text"
# The insert position, not pg_current_wal_lsn() (the write position): with asynchronous
# commit the commit record may still sit in WAL buffers, before the write position.
WRITE_LSN = "SELECT pg_current_wal_insert_lsn()::text"
# Lag 0 when the replica has replayed everything the primary had flushed when the check
# started; otherwise the age of the last transaction it replayed (NULL: none since start).
REPLICA_STATE = """
SELECT pg_is_in_recovery() AS standby,
       pg_last_wal_replay_lsn()::text AS replay_lsn,
       CASE WHEN pg_last_wal_replay_lsn() >= $1::text::pg_lsn THEN 0
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())
       END AS lag"""
_LSN = re.compile(r"^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})\Z")


def parse_lsn(text: str) -> int | None:
    """`X/Y` (PostgreSQL's pg_lsn text) as an integer; None when malformed."""
    match = _LSN.match(text.strip())
    if match is None:
        return None
    return (int(match.group(1), 16) << 32) | int(match.group(2), 16)


@dataclass
class WriteLsn:
    """The primary's WAL position after the call's last write (empty: no write)."""

    lsn: str = ""


_min_lsn: contextvars.ContextVar[int | None] = contextvars.ContextVar("min_lsn", default=None)
_write_lsn: contextvars.ContextVar[WriteLsn | None] = contextvars.ContextVar(
    "write_lsn", default=None
)


@contextlib.contextmanager
def read_your_writes(min_lsn: str) -> Iterator[WriteLsn]:
    """Within the block, searches need replay >= `min_lsn` and writes report their LSN."""
    box = WriteLsn()
    tokens = (_min_lsn.set(parse_lsn(min_lsn) if min_lsn else None), _write_lsn.set(box))
    try:
        yield box
    finally:
        # A generator closed from another context (garbage collection) cannot reset.
        with contextlib.suppress(ValueError):
            _write_lsn.reset(tokens[1])
            _min_lsn.reset(tokens[0])


@dataclass
class Replica:
    """One replica and what the last check saw."""

    dsn: str
    db: Database
    healthy: bool = False
    lag: float = math.inf
    replay_lsn: int = 0
    opened: bool = False

    def eligible(self, max_lag: float, min_lsn: int | None) -> bool:
        """Up, within the lag bound, and past `min_lsn` when one is required."""
        caught_up = min_lsn is None or self.replay_lsn >= min_lsn
        return self.healthy and self.lag <= max_lag and caught_up


@dataclass
class ReplicaRouter:
    """Routes searches to replicas and keeps their health and lag current."""

    primary: Database
    dsns: Sequence[str]
    pool: PoolSettings
    max_lag: float = 10.0
    interval: float = 1.0
    replicas: list[Replica] = field(default_factory=list)
    reads: dict[str, int] = field(default_factory=lambda: {"primary": 0, "replica": 0})
    _next: int = 0
    _task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self.replicas = [Replica(dsn, Database(dsn, self.pool)) for dsn in self.dsns]

    async def open(self) -> None:
        """Check every replica once (a down one is skipped), then keep checking."""
        await self.check()
        self._task = asyncio.create_task(self._check_forever())

    async def close(self) -> None:
        """Stop checking and close the replica pools."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for replica in self.replicas:
            await replica.db.close()

    async def _check_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except Exception:  # the primary is down: the readiness probe reports it
                log.warning("replica check failed", exc_info=True)

    async def check(self) -> None:
        """Refresh health, replay position and lag of every replica."""
        position = await self.primary.run(lambda conn: conn.fetchval(PRIMARY_POSITION))
        await asyncio.gather(*(self._check_one(r, str(position)) for r in self.replicas))

    async def _check_one(self, replica: Replica, primary_position: str) -> None:
        try:
            if not replica.opened:
                await replica.db.open()
                replica.opened = True
            row = await replica.db.run(lambda conn: conn.fetchrow(REPLICA_STATE, primary_position))
        except Exception:  # down, or not yet replayed the schema (no vector type): skip it
            log.debug("replica %d unavailable", self.replicas.index(replica), exc_info=True)
            replica.healthy = False
            return
        replay = parse_lsn(row["replay_lsn"] or "")
        replica.healthy = bool(row["standby"]) and replay is not None
        replica.replay_lsn = replay or 0
        replica.lag = math.inf if row["lag"] is None else float(row["lag"])

    def pick(self) -> Replica | None:
        """The next eligible replica for the current call, or None (use the primary)."""
        min_lsn = _min_lsn.get()
        count = len(self.replicas)
        for step in range(count):
            replica = self.replicas[(self._next + step) % count]
            if replica.eligible(self.max_lag, min_lsn):
                self._next = (self._next + step + 1) % count
                return replica
        return None

    async def read(self, work: Callable[[Conn], Awaitable[T]]) -> T:
        """Idempotent read work on an eligible replica, else (or if it fails) the primary."""
        replica = self.pick()
        if replica is not None:
            try:
                result = await replica.db.run(work)
            except errors.Unavailable:
                # Down, or the statement lost a conflict with recovery: the primary answers.
                replica.healthy = False
            else:
                self.reads["replica"] += 1
                return result
        result = await self.primary.run(work)
        self.reads["primary"] += 1
        return result

    def usage(self) -> tuple[int, int]:
        """(connections in use, connections open) over every replica's pool."""
        usages = [replica.db.usage() for replica in self.replicas]
        return sum(u[0] for u in usages), sum(u[1] for u in usages)

    async def note_write(self, conn: Conn) -> None:
        """Record the primary's WAL position for the current call (after its write)."""
        box = _write_lsn.get()
        if box is not None:
            box.lsn = str(await conn.fetchval(WRITE_LSN))
