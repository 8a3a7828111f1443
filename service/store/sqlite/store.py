"""SqliteStore: the embedded backend (one file, FTS5, sqlite-vec, WAL, one writer thread)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import apsw

from service import context as request_context
from service import tracing
from service.embeddings.base import EmbeddingIdentity
from service.fair_queue import FairQueue
from service.store.base import (
    AccountRecord,
    Capabilities,
    DocKey,
    DocumentWrite,
    Mode,
    Outcome,
    ProjectRecord,
    ProjectStatus,
    SearchPage,
    SearchPlan,
    StatementHook,
    StoreStats,
    plan_span_attributes,
)
from service.store.matrices import QuietRefresh
from service.store.sqlite import accounts, limits, reads
from service.store.sqlite import writes as write_path
from service.store.sqlite.connection import ConnectionPool
from service.store.sqlite.file_lock import file_lock
from service.store.sqlite.lexical_cache import SqliteLexicalCache
from service.store.sqlite.lexical_check import Fts5Checker
from service.store.sqlite.schema import VectorIndex, migrate, prepare_vector_index
from service.store.sqlite.search import check_plan, run_search
from service.store.sqlite.vector_cache import VectorCache

log = logging.getLogger("search.store.sqlite")

DEFAULT_READERS = 4
# The store's own default when built directly (tests, tools); the server passes
# SEARCH_SQLITE_VECTOR_CACHE_MB, by default memory-scaled (service/memory.py).
DEFAULT_VECTOR_CACHE_BYTES = 256 * 1024 * 1024
ADAPTER = "sqlite-vec"
DB_SYSTEM = "sqlite"


T = TypeVar("T")


class _Running:
    """One statement on a reader thread that its caller can stop from the event loop:
    `sqlite3_interrupt` (FTS5 prefix expansion does not reach the progress handler) while
    the statement runs, and a flag for the progress handler in case it has not started."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._conn: apsw.Connection | None = None

    def run(self, conn: apsw.Connection, job: Callable[[], T]) -> T:
        with self._lock:
            self._conn = conn
        try:
            return job()
        finally:
            with self._lock:  # from here on the connection may serve another job
                self._conn = None

    def cancel(self) -> None:
        self.cancelled.set()
        with self._lock:
            if self._conn is not None:
                self._conn.interrupt()


class SqliteStore:
    """Store on one SQLite file: writes through one thread, reads on a small thread pool."""

    def __init__(
        self,
        path: Path,
        identity: EmbeddingIdentity | None = None,
        *,
        load_vector_extension: bool = True,
        readers: int = DEFAULT_READERS,
        vector_cache_bytes: int = DEFAULT_VECTOR_CACHE_BYTES,
        vector_cache_refresh: float = 0.0,
        lexical_cache_bytes: int = DEFAULT_VECTOR_CACHE_BYTES,
    ) -> None:
        self._path = Path(path)
        self._identity = identity
        self._vectors = load_vector_extension
        self._writer = ConnectionPool(
            self._path, load_vector_extension, reader=False, size=1, name="sqlite-writer"
        )
        # Searches hold at most `readers` of these threads (in turns, see FairQueue); the
        # last one serves the small reads (scope checks, listings) however busy they are.
        self._readers = ConnectionPool(
            self._path,
            load_vector_extension,
            reader=True,
            size=readers + 1,
            name="sqlite-reader",
        )
        self._search_turns = FairQueue(readers, reason="READERS_BUSY", what="a reader thread")
        self._checker = Fts5Checker()
        self._reads = 0
        self._index = VectorIndex(None, False)
        # The KNN path's candidates (vector_cache.py); 0 bytes leaves them to vec0.
        self._vector_cache = VectorCache(vector_cache_bytes)
        # The FTS ranking's postings (lexical_cache.py); 0 bytes ranks in SQL.
        self._lexical_cache = SqliteLexicalCache(lexical_cache_bytes)
        self._warming: asyncio.Task[None] | None = None
        # After this process's own writes, the matrices they moved are read again once
        # writes are quiet (writes of other processes are found by the searches).
        self._refresh = QuietRefresh(self._warm, vector_cache_refresh)
        self._capabilities = Capabilities("sqlite", False, ADAPTER, "the store is not open")
        self._memory_refresh = asyncio.Lock()  # ':memory:' has no file to lock

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def capabilities(self) -> Capabilities:
        """Vector search is on when sqlite-vec loaded; `vector_reason` says what is missing."""
        return self._capabilities

    async def open(self) -> None:
        """Create the file if needed, migrate, and (re)build the vec0 table for `identity`."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        await self._writer.run(migrate)
        support = self._writer.support
        self._index = await self._writer.run(
            lambda conn: prepare_vector_index(conn, self._identity, support.loaded)
        )
        self._capabilities = Capabilities("sqlite", support.loaded, ADAPTER, support.reason)
        # In the background: searches may start before it is done (and load for
        # themselves what it has not read yet).
        self._warming = asyncio.create_task(self._warm())

    async def _warm(self) -> None:
        """Read the matrices and postings that are missing or stale when all fit (at
        start-up, and after this process's writes have been quiet: `_refresh`)."""
        identity, cache, lexical = self._index.identity, self._vector_cache, self._lexical_cache
        if lexical.enabled:
            try:
                read = await self._readers.run_unhooked(lexical.warm)
            except Exception:  # a cold cache is only slower: never fail the store over it
                log.warning("sqlite lexical cache warm-up failed", exc_info=True)
            else:
                log.info("sqlite lexical cache warm", extra={"projects": read})
        if not (self._index.usable and identity is not None and cache.enabled):
            return
        try:
            read = await self._readers.run_unhooked(lambda conn: cache.warm(conn, identity))
        except Exception:  # a cold cache is only slower: never fail the store over it
            log.warning("sqlite vector cache warm-up failed", exc_info=True)
        else:
            log.info("sqlite vector cache warm", extra={"projects": read})

    async def warmed(self) -> None:
        """Wait for the caches' start-up read (tests, benchmarks)."""
        if self._warming is not None:
            await asyncio.shield(self._warming)

    async def close(self) -> None:
        """Finish running jobs and close every connection."""
        if self._warming is not None:
            self._warming.cancel()
            await asyncio.gather(self._warming, return_exceptions=True)
        await self._refresh.aclose()
        await asyncio.to_thread(self._writer.close)
        await asyncio.to_thread(self._readers.close)
        self._checker.close()

    async def ping(self) -> None:
        """Raise errors.Unavailable when the file cannot be read."""
        await self._readers.run(lambda conn: conn.execute("SELECT 1").fetchall())

    def add_statement_hook(self, hook: StatementHook) -> None:
        """Call `hook(sql)` for every statement run on the store's connections."""
        self._readers.add_hook(hook)
        self._writer.add_hook(hook)

    async def create_project(self, tenant: str, external_id: str, name: str) -> ProjectRecord:
        """Create a project; errors.AlreadyExists when the external id is taken."""
        return await self._writer.run(
            lambda conn: write_path.create_project(conn, tenant, external_id, name)
        )

    async def list_projects(self, tenant: str, after_id: int, limit: int) -> list[ProjectRecord]:
        """Projects of `tenant` with id > after_id, by id."""
        return await self._readers.run(
            lambda conn: reads.list_projects(conn, tenant, after_id, limit)
        )

    async def get_projects(self, tenant: str, project_ids: Sequence[int]) -> list[ProjectRecord]:
        """The subset of `project_ids` owned by `tenant`."""
        ids = list(project_ids)
        if not ids:
            return []
        return await self._readers.run(lambda conn: reads.get_projects(conn, tenant, ids))

    async def delete_project(self, tenant: str, project_id: int) -> int | None:
        """Delete a project of `tenant` with everything in it; None when not found."""
        index = self._index
        deleted = await self._writer.run(
            lambda conn: write_path.delete_project(conn, tenant, project_id, index)
        )
        self._refresh.notice()
        return deleted

    async def document_hashes(
        self, tenant: str, project_id: int, keys: Sequence[DocKey]
    ) -> dict[DocKey, str]:
        """Stored content hashes (NotFound when the project is not the tenant's)."""
        wanted = list(keys)
        # Upsert work runs on the writer's thread, never on the searches' reader threads.
        return await self._writer.run(
            lambda conn: reads.document_hashes(conn, tenant, project_id, wanted)
        )

    async def ready_vectors(
        self,
        tenant: str,
        project_id: int,
        source_hashes: Sequence[str],
        identity: EmbeddingIdentity,
    ) -> dict[str, list[float]]:
        """Ready vectors of `identity` already stored in the project for these chunk texts."""
        hashes = list(source_hashes)
        return await self._writer.run(  # upsert work: on the writer's thread, as above
            lambda conn: reads.ready_vectors(conn, tenant, project_id, hashes, identity)
        )

    async def write_documents(
        self, tenant: str, project_id: int, writes: Sequence[DocumentWrite]
    ) -> list[Outcome]:
        """Replace each document with its chunks and vectors (one transaction)."""
        batch, index = list(writes), self._index
        if not batch:
            return []
        with tracing.db_span(DB_SYSTEM, "write_documents", **{"search.documents": len(batch)}):
            outcomes = await self._writer.run(
                lambda conn: write_path.write_documents(conn, tenant, project_id, batch, index)
            )
        self._refresh.notice()
        return outcomes

    async def delete_documents(self, tenant: str, project_id: int, keys: Sequence[DocKey]) -> int:
        """Delete documents; returns how many existed (NotFound: not the tenant's project)."""
        wanted, index = list(keys), self._index
        deleted = await self._writer.run(
            lambda conn: write_path.delete_documents(conn, tenant, project_id, wanted, index)
        )
        self._refresh.notice()
        return deleted

    async def index_status(
        self, tenant: str, project_ids: Sequence[int], identity: EmbeddingIdentity | None
    ) -> list[ProjectStatus]:
        """Status of the tenant's projects among `project_ids` (all of them when empty)."""
        ids = list(project_ids)
        return await self._readers.run(lambda conn: reads.index_status(conn, tenant, ids, identity))

    async def search(self, plan: SearchPlan) -> SearchPage:
        """One retrieval statement (FTS total included) over the plan's scope."""
        caps = self._capabilities
        check_plan(plan, caps.vector_search, caps.vector_reason)
        if not plan.project_ids:
            total = 0 if plan.mode is Mode.FTS else None
            return SearchPage((), total, False, False, True)
        index, checker, cache = self._index, self._checker, self._vector_cache
        lexical = self._lexical_cache
        self._reads += 1
        running = _Running()
        with tracing.db_span(DB_SYSTEM, "search", **plan_span_attributes(plan)):
            # Searches take turns at the reader threads by tenant; one that would wait past
            # its call's deadline is refused at once (READERS_BUSY, RetryInfo).
            budget = request_context.current().time_remaining()
            async with self._search_turns.turn(plan.tenant, budget):
                try:
                    return await self._readers.run(
                        lambda conn: running.run(
                            conn,
                            lambda: run_search(
                                conn, plan, index, checker, running.cancelled, cache, lexical
                            ),
                        )
                    )
                except asyncio.CancelledError:
                    running.cancel()  # the statement stops now; its reader thread is free again
                    raise

    def stats(self) -> StoreStats:
        """Busy connections of the reader and writer threads, and searches served."""
        readers, writer = self._readers.usage, self._writer.usage
        return StoreStats(
            readers[0] + writer[0],
            readers[1] + writer[1],
            {"primary": self._reads},
            self._vector_cache.stats() if self._vector_cache.enabled else None,
            self._lexical_cache.stats() if self._lexical_cache.enabled else None,
        )

    async def pending_chunks(self) -> int:
        """Chunks of every tenant without a ready vector of the configured embedding."""
        identity = self._identity
        if identity is None:
            return 0
        return await self._readers.run_unhooked(lambda conn: reads.pending_chunks(conn, identity))

    async def create_account(self, record: AccountRecord) -> None:
        """Store an account."""
        await self._writer.run(lambda conn: accounts.create_account(conn, record))

    async def list_accounts(self, tenant: str) -> list[AccountRecord]:
        """Accounts of `tenant`."""
        return await self._readers.run(lambda conn: accounts.list_accounts(conn, tenant))

    async def all_accounts(self, after: str = "", limit: int = 500) -> list[AccountRecord]:
        """Up to `limit` of every tenant's accounts after `after`, in id order (maintenance)."""
        return await self._readers.run(lambda conn: accounts.all_accounts(conn, after, limit))

    async def delete_account(self, tenant: str, account_id: str) -> bool:
        """Delete an account of `tenant`; False when not found."""
        return await self._writer.run(
            lambda conn: accounts.delete_account(conn, tenant, account_id)
        )

    async def set_account_reconnect(
        self, tenant: str, account_id: str, needs: bool, *, sealed: bytes | None = None
    ) -> None:
        """Mark an account as needing reconnection (after a 401/403) or healthy again (with
        `sealed`: only while it holds those credentials)."""
        await self._writer.run(
            lambda conn: accounts.set_reconnect(conn, tenant, account_id, needs, sealed)
        )

    async def replace_account_credentials(
        self,
        tenant: str,
        account_id: str,
        sealed_credentials: bytes,
        *,
        needs_reconnect: bool | None = None,
    ) -> bool:
        """Replace an account's sealed credentials in place; False when not found."""
        return await self._writer.run(
            lambda conn: accounts.replace_credentials(
                conn, tenant, account_id, sealed_credentials, needs_reconnect
            )
        )

    async def record_rate_limit(
        self, account_id: str, resource: str, until: float, *, now: float
    ) -> None:
        """Remember a provider's wait for the account's resource (the later wait wins)."""
        await self._writer.run(lambda conn: limits.record(conn, account_id, resource, until, now))

    async def rate_limits(
        self, account_ids: Sequence[str], *, now: float
    ) -> dict[str, dict[str, float]]:
        """The accounts' waits still running at `now`: account -> resource -> until."""
        return await self._readers.run(lambda conn: limits.active(conn, account_ids, now))

    async def refresh_account_credentials(
        self,
        tenant: str,
        account_id: str,
        refresh: Callable[[bytes], Awaitable[bytes | None]],
    ) -> bytes | None:
        """Run `refresh(sealed)` under a lock shared by every process on this file; store it."""
        if str(self._path) == ":memory:":
            lock: contextlib.AbstractAsyncContextManager[None] = self._memory_refresh
        else:
            real = self._path.resolve()  # one lock file however a process names the file
            lock = file_lock(real.with_name(real.name + "-refresh.lock"))
        async with lock:
            sealed = await self._writer.run(
                lambda conn: accounts.read_credentials(conn, tenant, account_id)
            )
            if sealed is None:
                return None
            fresh = await refresh(sealed)
            if fresh is None:
                return sealed
            return await self._writer.run(
                lambda conn: accounts.swap_credentials(conn, tenant, account_id, sealed, fresh)
            )
