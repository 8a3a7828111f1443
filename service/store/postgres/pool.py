"""The asyncpg pool, its codecs, and a connection wrapper that reports every statement."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NoReturn, TypeAlias, TypeVar

import asyncpg
from pgvector.asyncpg import register_vector

from service import errors
from service.store.base import StatementHook
from service.store.postgres.errors import is_connection_lost, translate, unavailable

T = TypeVar("T")


@dataclass(frozen=True)
class PoolSettings:
    """Pool sizing and per-connection session settings."""

    min_size: int = 1
    max_size: int = 10
    connect_timeout: float = 10.0
    acquire_timeout: float = 10.0
    # hnsw.ef_search is only the first batch: iterative scans keep going until LIMIT is met.
    hnsw_ef_search: int = 100
    hnsw_max_scan_tuples: int = 20_000
    # Hash partitions by project: only a plan made for the call's scope prunes partitions
    # (the scope is an array parameter, which a reused generic plan cannot prune).
    custom_plans_only: bool = False


# Unpartitioned, every prepared statement reuses its generic plan. With `auto` PostgreSQL
# planned a search statement afresh for each call (2.2-2.3 ms of planning for a HYBRID
# statement, more than its execution) until it judged the generic plan cheaper, and then
# switched on its own, so a statement's plan changed under load. Measured at 100k chunks
# (16 queries, every mode, unfiltered and five filter shapes, cache and index paths, pages
# identical): unfiltered p50 FTS 2.3 -> 1.3 ms, VECTOR 5.0 -> 3.7, HYBRID 7.4 -> 4.7 (index
# path 16.3 -> 14.0); filtered within a few ms either way. The statements are written so
# that a plan that knows neither the scope nor the filters' selectivity stays linear (see
# search_sql.DOCUMENT_PASSES).
GENERIC_PLANS = {"plan_cache_mode": "force_generic_plan"}
CUSTOM_PLANS = {"plan_cache_mode": "force_custom_plan"}


def server_settings(settings: PoolSettings) -> dict[str, str]:
    """Session settings sent when each pool connection starts."""
    extra = CUSTOM_PLANS if settings.custom_plans_only else GENERIC_PLANS
    return {
        **extra,
        "application_name": "search-service",
        # JIT compilation costs tens of milliseconds and never pays off for these statements.
        "jit": "off",
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.ef_search": str(settings.hnsw_ef_search),
        "hnsw.max_scan_tuples": str(settings.hnsw_max_scan_tuples),
    }


async def init_connection(conn: asyncpg.Connection) -> None:
    """Register the vector and jsonb codecs on a new pool connection."""
    await register_vector(conn)
    await conn.set_type_codec(
        "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog", format="text"
    )


async def keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset of a released connection: nothing beyond what asyncpg always does
    first (roll back an open transaction, drop listeners).

    asyncpg's default sends `pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL` at
    every release, a round trip that a search awaits before it returns (the store's FTS call
    at 100k chunks, interleaved with other engines: 2.34 -> 2.19 ms p50 without it). The
    service leaves no session state behind: its settings are startup parameters
    (`server_settings`) or `SET LOCAL`, its advisory locks are transaction-level, and it uses
    no LISTEN and no cursor outside a transaction. Whoever adds session state must reset it
    here."""
    del conn


class Conn:
    """An acquired connection whose statements are reported to the statement hooks."""

    def __init__(self, raw: asyncpg.Connection, hooks: Sequence[StatementHook]) -> None:
        self.raw = raw
        self._hooks = hooks

    def _report(self, sql: str) -> None:
        for hook in self._hooks:
            hook(sql)

    async def execute(self, sql: str, *args: Any, statement_timeout: float | None = None) -> str:
        """Run a statement; returns its status tag."""
        self._report(sql)
        result: str = await self.raw.execute(sql, *args, timeout=statement_timeout)
        return result

    async def fetch(
        self, sql: str, *args: Any, statement_timeout: float | None = None
    ) -> list[Any]:
        """Run a query; returns its records."""
        self._report(sql)
        rows: list[Any] = await self.raw.fetch(sql, *args, timeout=statement_timeout)
        return rows

    async def fetchrow(self, sql: str, *args: Any, statement_timeout: float | None = None) -> Any:
        """Run a query; returns its first record or None."""
        self._report(sql)
        return await self.raw.fetchrow(sql, *args, timeout=statement_timeout)

    async def fetchval(self, sql: str, *args: Any, statement_timeout: float | None = None) -> Any:
        """Run a query; returns the first column of its first record."""
        self._report(sql)
        return await self.raw.fetchval(sql, *args, timeout=statement_timeout)

    async def copy_records(
        self, table: str, columns: Sequence[str], records: Iterable[Sequence[Any]]
    ) -> None:
        """COPY records into a table (binary format, using the registered codecs)."""
        self._report(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT binary)")
        await self.raw.copy_records_to_table(table, columns=list(columns), records=records)


class Database:
    """The pool and its statement hooks; every failure leaves here as a ServiceError."""

    def __init__(self, dsn: str, settings: PoolSettings) -> None:
        self._dsn = dsn
        self._settings = settings
        self._pool: asyncpg.Pool | None = None
        self._hooks: list[StatementHook] = []

    def add_hook(self, hook: StatementHook) -> None:
        """Report every statement to `hook` (tests count retrieval statements)."""
        self._hooks.append(hook)

    async def open(self) -> None:
        """Create the pool (the schema must exist: the vector codec needs its type)."""
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._settings.min_size,
                max_size=self._settings.max_size,
                timeout=self._settings.connect_timeout,
                init=init_connection,
                reset=keep_session,
                server_settings=server_settings(self._settings),
            )
        except Exception as exc:
            _raise_mapped(exc)

    def usage(self) -> tuple[int, int]:
        """(connections in use, connections open); (0, 0) before open and after close."""
        pool = self._pool
        if pool is None:
            return 0, 0
        size = pool.get_size()
        return size - pool.get_idle_size(), size

    async def close(self) -> None:
        """Close the pool, waiting for connections in use."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @asynccontextmanager
    async def unpooled(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection outside the pool (migrations run before the vector type exists)."""
        try:
            raw = await asyncpg.connect(
                self._dsn,
                timeout=self._settings.connect_timeout,
                server_settings={"application_name": "search-service-migrate"},
            )
        except Exception as exc:
            _raise_mapped(exc)
        try:
            yield raw
        except Exception as exc:
            _raise_mapped(exc)
        finally:
            await raw.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A pooled connection; database failures inside the block become ServiceErrors."""
        pool = self._pool
        if pool is None:
            raise errors.Unavailable("the store is not open", retry_after=1.0)
        try:
            raw = await pool.acquire(timeout=self._settings.acquire_timeout)
        except TimeoutError as exc:
            raise unavailable(exc) from exc
        except Exception as exc:
            _raise_mapped(exc)
        try:
            yield Conn(raw, self._hooks)
        except Exception as exc:
            if is_connection_lost(exc):
                # Never hand a connection in an unknown protocol state to the next caller
                # (a connection the server closed was already detached by the pool).
                with contextlib.suppress(asyncpg.InterfaceError):
                    raw.terminate()
            _raise_mapped(exc)
        finally:
            # A terminated or broken connection is replaced by the pool; nothing to report.
            with contextlib.suppress(Exception):
                await pool.release(raw)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """A pooled connection inside one transaction."""
        async with self.connection() as conn, conn.raw.transaction():
            yield conn

    async def run(self, work: Callable[[Conn], Awaitable[T]], *, retry: bool = True) -> T:
        """`work` on a pooled connection, once more on a fresh one if the first was dead.

        Only for idempotent work: after a server restart the pool may still hold a
        connection whose socket died while idle.
        """
        for attempt in range(2):
            try:
                async with self.connection() as conn:
                    return await work(conn)
            except errors.Unavailable as exc:
                cause = exc.__cause__
                if not retry or attempt or cause is None or not is_connection_lost(cause):
                    raise
        raise AssertionError("unreachable")

    async def run_unhooked(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """`work` on a raw pooled connection, not reported to hooks (background maintenance)."""
        async with self.connection() as conn:
            return await work(conn.raw)


def _raise_mapped(exc: Exception) -> NoReturn:
    mapped = translate(exc)
    if mapped is None:
        raise exc
    raise mapped from exc


# In-process caches read in a read-only transaction whose lock waits are short: a read never
# queues behind a lock (a LOCK TABLE, DDL) while holding a pooled connection that searches
# need, as the background refresh otherwise would for as long as the lock lasts; it fails
# with LockNotAvailableError instead (the search ranks in SQL or asks the index, the refresh
# tries again after the next writes).
CACHE_LOCK_TIMEOUT = "SET LOCAL lock_timeout = '200ms'"
Reader: TypeAlias = "Conn | asyncpg.Connection"  # what the caches read on: pooled, or raw


async def cache_read_row(
    conn: Reader, sql: str, *args: Any, statement_timeout: float | None = None
) -> Any:
    """One row for an in-process cache, on a pooled or raw connection (see above)."""
    raw: asyncpg.Connection = conn.raw if isinstance(conn, Conn) else conn
    async with raw.transaction(readonly=True):
        await raw.execute(CACHE_LOCK_TIMEOUT)
        return await raw.fetchrow(sql, *args, timeout=statement_timeout)
