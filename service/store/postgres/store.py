"""PostgresStore: the production backend (asyncpg pool, pgvector, one statement per search)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable, Sequence

import asyncpg

from service import context as request_context
from service import errors, tracing
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
from service.store.postgres import accounts, limits, projects
from service.store.postgres import writes as write_path
from service.store.postgres.ann import AnnMaintainer
from service.store.postgres.lexical_cache import PgLexicalCache
from service.store.postgres.migrations import apply_migrations, ensure_vector_index
from service.store.postgres.pool import Conn, Database, PoolSettings
from service.store.postgres.replicas import ReplicaRouter
from service.store.postgres.search import check_plan, run_search
from service.store.postgres.vector_cache import PgVectorCache

ADAPTER = "pgvector"
DELETE_ATTEMPTS = 5  # DeleteProject retried on a deadlock
PING = "SELECT 1"
DB_SYSTEM = "postgresql"
log = logging.getLogger("search.store.postgres")


class PostgresStore:
    """Store on PostgreSQL + pgvector; safe to run from several replicas at once."""

    def __init__(
        self,
        dsn: str,
        identity: EmbeddingIdentity | None = None,
        *,
        min_size: int = 1,
        max_size: int = 10,
        search_timeout: float | None = None,
        ann_maintenance: bool = True,
        settings: PoolSettings | None = None,
        replica_dsns: Sequence[str] = (),
        replica_max_lag: float = 10.0,
        replica_check_interval: float = 1.0,
        partitions: int = 0,
        vector_cache_bytes: int = 0,
        vector_cache_refresh: float = 0.0,
        lexical_cache_bytes: int = 0,
    ) -> None:
        self._settings = dataclasses.replace(
            settings or PoolSettings(),
            min_size=min_size,
            max_size=max_size,
            custom_plans_only=partitions > 0,
        )
        self._dsn = dsn
        self._identity = identity
        self._search_timeout = search_timeout
        self._db = Database(dsn, self._settings)
        # Searches hold at most all but one connection of the pools (in turns, see
        # FairQueue); the last primary one serves writes and the small reads (scope checks,
        # listings) however busy searches are.
        self._search_turns = FairQueue(
            max(1, max_size * (1 + len(replica_dsns)) - 1),
            reason="READERS_BUSY", what="a database connection",
        )
        self._ann = AnnMaintainer(self._db, identity) if identity is not None else None
        self._ann_background = ann_maintenance
        self._partitions = partitions
        self._reads = 0
        self._vector_cache = PgVectorCache(vector_cache_bytes)
        self._lexical_cache = PgLexicalCache(lexical_cache_bytes)
        self._warming: asyncio.Task[None] | None = None
        # After this process's own writes, the matrices they moved are read again once
        # writes are quiet (writes of other processes are found by the searches).
        self._refresh = QuietRefresh(self._warm, vector_cache_refresh)
        self._replicas = (
            ReplicaRouter(
                self._db, replica_dsns, self._settings, replica_max_lag, replica_check_interval
            )
            if replica_dsns
            else None
        )

    @property
    def capabilities(self) -> Capabilities:
        """pgvector is a schema requirement, so vector search is always available."""
        return Capabilities("postgres", True, ADAPTER)

    @property
    def dsn(self) -> str:
        """The database this store uses."""
        return self._dsn

    @property
    def identity(self) -> EmbeddingIdentity | None:
        """The configured embedding identity (its HNSW index is made at open)."""
        return self._identity

    async def open(self) -> None:
        """Apply migrations and the identity's HNSW index (advisory lock), then pool up."""
        async with self._db.unpooled() as conn:
            await apply_migrations(conn, self._partitions)
            if self._identity is not None:
                await ensure_vector_index(conn, self._identity)
        await self._db.open()
        if self._replicas is not None:
            await self._replicas.open()
        if self._ann is not None and self._ann_background:
            self._ann.start()
        # In the background: searches may start before it is done (and load for
        # themselves what it has not read yet).
        self._warming = asyncio.create_task(self._warm())

    async def _warm(self) -> None:
        """Read the matrices and postings that are missing or stale while they fit (at
        start-up, and after this process's writes have been quiet: `_refresh`)."""
        identity, cache, lexical = self._identity, self._vector_cache, self._lexical_cache
        if lexical.enabled:
            try:
                read = await self._db.run_unhooked(lexical.warm)
            except Exception:  # a cold cache is only slower: never fail the store over it
                log.warning("postgres lexical cache warm-up failed", exc_info=True)
            else:
                log.info("postgres lexical cache warm", extra={"projects": read})
        if identity is None or not cache.enabled:
            return
        try:
            read = await self._db.run_unhooked(lambda conn: cache.warm(conn, identity))
        except Exception:  # a cold cache is only slower: never fail the store over it
            log.warning("postgres vector cache warm-up failed", exc_info=True)
        else:
            log.info("postgres vector cache warm", extra={"projects": read})

    async def warmed(self) -> None:
        """Wait for the caches' start-up reads (lexical postings, then vectors; tests,
        benchmarks)."""
        if self._warming is not None:
            await asyncio.shield(self._warming)

    @property
    def replicas(self) -> ReplicaRouter | None:
        """The read-replica router, when replica DSNs were given."""
        return self._replicas

    async def close(self) -> None:
        """Stop HNSW maintenance and the cache's start-up read, and close the pool."""
        if self._warming is not None:
            self._warming.cancel()
            await asyncio.gather(self._warming, return_exceptions=True)
        await self._refresh.aclose()
        if self._ann is not None:
            await self._ann.stop()
        if self._replicas is not None:
            await self._replicas.close()
        await self._db.close()

    async def index_ann_backlog(self, limit: int = 1_000_000) -> int:
        """Add up to `limit` ready vectors to the HNSW index now (tests, benchmarks, ops).

        A background task does this continuously; searches are complete either way.
        """
        return await self._ann.drain(limit) if self._ann is not None else 0

    async def ping(self) -> None:
        """Raise errors.Unavailable when the database cannot be reached."""

        async def work(conn: Conn) -> None:
            await conn.fetchval(PING)

        await self._db.run(work)

    def add_statement_hook(self, hook: StatementHook) -> None:
        """Call `hook(sql)` for every statement this store executes."""
        self._db.add_hook(hook)

    async def create_project(self, tenant: str, external_id: str, name: str) -> ProjectRecord:
        """Create a project; errors.AlreadyExists when the external id is taken."""
        async with self._db.connection() as conn:
            record = await projects.create_project(conn, tenant, external_id, name)
            await self._note_write(conn)
            return record

    async def list_projects(self, tenant: str, after_id: int, limit: int) -> list[ProjectRecord]:
        """Projects of `tenant` with id > after_id, by id."""
        return await self._db.run(
            lambda conn: projects.list_projects(conn, tenant, after_id, limit)
        )

    async def get_projects(self, tenant: str, project_ids: Sequence[int]) -> list[ProjectRecord]:
        """The subset of `project_ids` owned by `tenant`."""
        ids = list(project_ids)
        if not ids:
            return []
        return await self._db.run(lambda conn: projects.get_projects(conn, tenant, ids))

    async def delete_project(self, tenant: str, project_id: int) -> int | None:
        """Delete a project of `tenant` with everything in it; None when not found.

        The project row is locked first (in-flight upserts of the project finish, new ones
        wait), and a deadlock with a concurrent DeleteDocuments (both cascade through
        documents and chunks, in different orders) is retried: the delete always ends.
        """
        for attempt in range(DELETE_ATTEMPTS):
            try:
                async with self._db.connection() as conn:
                    async with conn.raw.transaction():
                        deleted = await projects.delete_project(conn, tenant, project_id)
                    await self._note_write(conn)
                    return deleted
            except errors.Unavailable as error:
                deadlock = isinstance(error.__cause__, asyncpg.exceptions.DeadlockDetectedError)
                if not deadlock or attempt == DELETE_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1) * (1 + random.random()))
        raise AssertionError("unreachable")

    async def document_hashes(
        self, tenant: str, project_id: int, keys: Sequence[DocKey]
    ) -> dict[DocKey, str]:
        """Stored content hashes (NotFound when the project is not the tenant's)."""
        wanted = list(keys)
        return await self._db.run(
            lambda conn: write_path.document_hashes(conn, tenant, project_id, wanted)
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
        return await self._db.run(
            lambda conn: write_path.ready_vectors(conn, tenant, project_id, hashes, identity)
        )

    async def write_documents(
        self, tenant: str, project_id: int, writes: Sequence[DocumentWrite]
    ) -> list[Outcome]:
        """Replace each document with its chunks and vectors (one transaction per batch)."""
        batch = list(writes)
        if not batch:
            return []
        async with self._db.connection() as conn:
            with tracing.db_span(DB_SYSTEM, "write_documents", **{"search.documents": len(batch)}):
                async with conn.raw.transaction():
                    outcomes = await write_path.write_documents(conn, tenant, project_id, batch)
            await self._note_write(conn)
            return outcomes

    async def delete_documents(self, tenant: str, project_id: int, keys: Sequence[DocKey]) -> int:
        """Delete documents; returns how many existed (NotFound: not the tenant's project)."""
        wanted = list(keys)
        async with self._db.connection() as conn:
            deleted = await write_path.delete_documents(conn, tenant, project_id, wanted)
            await self._note_write(conn)
            return deleted

    async def _note_write(self, conn: Conn) -> None:
        # After the commit: a replica that replayed up to here sees the write.
        if self._replicas is not None:
            await self._replicas.note_write(conn)
        self._refresh.notice()

    async def index_status(
        self, tenant: str, project_ids: Sequence[int], identity: EmbeddingIdentity | None
    ) -> list[ProjectStatus]:
        """Status of the tenant's projects among `project_ids` (all of them when empty)."""
        ids = list(project_ids)
        return await self._db.run(lambda conn: projects.index_status(conn, tenant, ids, identity))

    async def search(self, plan: SearchPlan) -> SearchPage:
        """One retrieval statement (FTS total included) over the plan's scope."""
        check_plan(plan)
        if not plan.project_ids:
            total = 0 if plan.mode is Mode.FTS else None
            return SearchPage((), total, False, False, True)
        timeout = plan.timeout if plan.timeout is not None else self._search_timeout
        # Searches take turns at the pool by tenant; one that would wait past its call's
        # deadline is refused at once (READERS_BUSY, RetryInfo), as on SQLite.
        budget = request_context.current().time_remaining()
        with tracing.db_span(DB_SYSTEM, "search", **plan_span_attributes(plan)):
            async with self._search_turns.turn(plan.tenant, budget):
                cache, lexical = self._vector_cache, self._lexical_cache
                if self._replicas is not None:
                    return await self._replicas.read(
                        lambda conn: run_search(conn, plan, timeout, cache, lexical)
                    )
                page = await self._db.run(
                    lambda conn: run_search(conn, plan, timeout, cache, lexical)
                )
            self._reads += 1
            return page

    def stats(self) -> StoreStats:
        """Pool usage over the primary and replica pools, and searches served by backend."""
        in_use, size = self._db.usage()
        reads = {"primary": self._reads, "replica": 0}
        if self._replicas is not None:
            replica_in_use, replica_size = self._replicas.usage()
            in_use, size = in_use + replica_in_use, size + replica_size
            reads = dict(self._replicas.reads)
        cache = self._vector_cache.stats() if self._vector_cache.enabled else None
        lexical = self._lexical_cache.stats() if self._lexical_cache.enabled else None
        return StoreStats(in_use, size, reads, cache, lexical)

    async def pending_chunks(self) -> int:
        """Chunks of every tenant without a ready vector of the configured embedding."""
        identity = self._identity
        if identity is None:
            return 0
        return await self._db.run_unhooked(lambda conn: projects.pending_chunks_raw(conn, identity))

    async def create_account(self, record: AccountRecord) -> None:
        """Store an account."""
        async with self._db.connection() as conn:
            await accounts.create_account(conn, record)

    async def list_accounts(self, tenant: str) -> list[AccountRecord]:
        """Accounts of `tenant`."""
        return await self._db.run(lambda conn: accounts.list_accounts(conn, tenant))

    async def all_accounts(self, after: str = "", limit: int = 500) -> list[AccountRecord]:
        """Up to `limit` of every tenant's accounts after `after`, in id order (maintenance)."""
        return await self._db.run(lambda conn: accounts.all_accounts(conn, after, limit))

    async def delete_account(self, tenant: str, account_id: str) -> bool:
        """Delete an account of `tenant`; False when not found."""
        async with self._db.connection() as conn:
            return await accounts.delete_account(conn, tenant, account_id)

    async def set_account_reconnect(
        self, tenant: str, account_id: str, needs: bool, *, sealed: bytes | None = None
    ) -> None:
        """Mark an account as needing reconnection (after a 401/403) or healthy again (with
        `sealed`: only while it holds those credentials)."""
        async with self._db.connection() as conn:
            await accounts.set_account_reconnect(conn, tenant, account_id, needs, sealed)

    async def replace_account_credentials(
        self,
        tenant: str,
        account_id: str,
        sealed_credentials: bytes,
        *,
        needs_reconnect: bool | None = None,
    ) -> bool:
        """Replace an account's sealed credentials in place; False when not found."""
        async with self._db.connection() as conn:
            return await accounts.replace_credentials(
                conn, tenant, account_id, sealed_credentials, needs_reconnect
            )

    async def record_rate_limit(
        self, account_id: str, resource: str, until: float, *, now: float
    ) -> None:
        """Remember a provider's wait for the account's resource (the later wait wins)."""
        async with self._db.connection() as conn:
            await limits.record(conn, account_id, resource, until, now)

    async def rate_limits(
        self, account_ids: Sequence[str], *, now: float
    ) -> dict[str, dict[str, float]]:
        """The accounts' waits still running at `now`: account -> resource -> until."""
        return await self._db.run(lambda conn: limits.active(conn, account_ids, now))

    async def refresh_account_credentials(
        self,
        tenant: str,
        account_id: str,
        refresh: Callable[[bytes], Awaitable[bytes | None]],
    ) -> bytes | None:
        """Run `refresh(sealed)` under the account's row lock and commit what it returns."""
        async with self._db.transaction() as conn:
            return await accounts.refresh_credentials(conn, tenant, account_id, refresh)
