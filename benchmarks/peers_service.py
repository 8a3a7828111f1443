"""The service's side of `peers` without gRPC: its store's one call per page, and the
retrieval statement alone on a connection of the harness.

The plan is built the way `service.projects.search.ProjectSearch` builds it (the request
validated with the same defaults, the text compiled by the same parser, the server's own
settings). The statement builders are internal and may change shape: the statement timing
is optional, and a builder that is missing or refuses the plan is reported, not fatal.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import asyncpg
import numpy as np

from benchmarks.client import Key
from benchmarks.peers_engines import Query
from service.context import DEFAULT_TENANT
from service.embeddings.base import EmbeddingIdentity
from service.memory import cache_budget
from service.projects.lexical import compile_query
from service.projects.request import ProjectSearchRequest, RawFilters, validate
from service.settings import Settings
from service.store import sqlite_path
from service.store.base import Mode, SearchPlan, Store

# Imported with this module (so before the corpus is loaded): a store that does not import
# fails the run at its start, not after minutes of loading.
from service.store.postgres.store import PostgresStore
from service.store.sqlite.store import SqliteStore

PAGE_SIZE = 10


def search_plan(
    settings: Settings, identity: EmbeddingIdentity, query: Query, mode: Mode
) -> SearchPlan:
    """The first page's plan, as ProjectSearch.pages makes it for this request."""
    valid = validate(
        ProjectSearchRequest(
            scope=query.scope,
            text=query.text,
            mode=mode,
            filters=RawFilters(),
            page_size=PAGE_SIZE,
            page_token="",
            max_pages=1,
            include_chunks=False,
            min_similarity=0.0,
        )
    )
    vector = tuple(float(x) for x in query.vector) if valid.mode is not Mode.FTS else None
    return SearchPlan(
        tenant=DEFAULT_TENANT,
        project_ids=valid.scope,
        mode=valid.mode,
        lexical=compile_query(valid.text) if valid.text.strip() else None,
        query_vector=vector,
        identity=identity,
        filters=valid.filters,
        limit=valid.page_size,
        offset=0,
        include_chunks=valid.include_chunks,
        min_similarity=valid.min_similarity,
        exact_scan_limit=settings.exact_scan_limit,
        timeout=settings.project_search_timeout,
        fusion=valid.fusion,
        rrf_k=valid.rrf_k,
        bm25_k1=settings.bm25_k1,
        bm25_b=settings.bm25_b,
    )


async def open_store(settings: Settings, identity: EmbeddingIdentity) -> Store:
    """A store of the harness on the server's database (no background index upkeep), its
    caches' start-up reads done (as the server's are before the harness times it), so that
    its first searches do not share the process with them."""
    url = settings.database_url.reveal()
    store: PostgresStore | SqliteStore
    if url:
        store = PostgresStore(url, identity, max_size=2, ann_maintenance=False,
                              vector_cache_bytes=cache_budget(settings.pg_vector_cache_mb),
                              lexical_cache_bytes=cache_budget(settings.pg_lexical_cache_mb))
    else:
        store = SqliteStore(sqlite_path(url, settings.data_dir), identity,
                            vector_cache_bytes=cache_budget(settings.sqlite_vector_cache_mb),
                            lexical_cache_bytes=cache_budget(settings.sqlite_lexical_cache_mb))
    await store.open()
    await store.warmed()
    return store


async def store_search(store: Store, plan: SearchPlan) -> tuple[float, list[Key]]:
    """`store.search(plan)`: seconds and the page's document keys."""
    started = time.perf_counter()
    page = await store.search(plan)
    seconds = time.perf_counter() - started
    return seconds, [(h.project_id, h.kind, h.row_id) for h in page.hits]


class Statement(Protocol):
    """The retrieval statement of a plan, run alone."""

    description: str

    async def run(self, plan: SearchPlan) -> float:
        """Seconds to execute the statement and fetch its rows (building it not included)."""
        ...

    async def close(self) -> None:
        """Release the connection."""
        ...

    def counters(self) -> str:
        """What the runner's caches did (for the log), or ''."""
        ...

    async def agreement(self, plans: Sequence[SearchPlan]) -> str:
        """Whether the in-process lexical ranking gave the SQL ranking's pages, or ''."""
        ...


def _builder(module: object, name: str) -> Any:
    # Looked up at run time: the builder is internal and is being reshaped (see the
    # module docstring); a missing one is reported as the reason the timing was skipped.
    found = getattr(module, name, None)
    if not callable(found):
        raise LookupError(f"{getattr(module, '__name__', module)}.{name} is not there")
    return found


class SqliteStatement:
    """`service.store.sqlite.search.fetch_rows(...)` on an apsw connection: the statement
    and, on the KNN path, the vector cache's candidates it binds, and for FTS the lexical
    cache's ranking it asks for (as the store runs it)."""

    description = (
        "service.store.sqlite.search.fetch_rows() (the statement, with the vector cache's "
        "KNN candidates and the lexical cache's ranking as the store has them) on an apsw "
        "reader connection"
    )

    def __init__(
        self, path: Path, cache_bytes: int, lexical_bytes: int = 0,
        identity: EmbeddingIdentity | None = None,
    ) -> None:
        from service.store.sqlite import search
        from service.store.sqlite.connection import connect
        from service.store.sqlite.lexical_cache import SqliteLexicalCache
        from service.store.sqlite.lexical_check import Fts5Checker, register_functions
        from service.store.sqlite.schema import SELECT_VECTOR_INDEX, VectorIndex
        from service.store.sqlite.vector_cache import VectorCache

        self._fetch = _builder(search, "fetch_rows")
        self._page = _builder(search, "page_from_rows")
        self._cache = VectorCache(cache_bytes)  # the server's budgets
        self._lexical = SqliteLexicalCache(lexical_bytes)
        self._conn, support = connect(path, True, reader=True)
        if self._lexical.enabled:
            self._lexical.warm(self._conn)  # as the server's start-up does
        register_functions(self._conn)
        row = self._conn.execute(SELECT_VECTOR_INDEX).fetchone()
        usable = row is not None and support.loaded and not row[2]
        self._index = VectorIndex(EmbeddingIdentity(row[0], row[1]) if row else None, usable)
        if identity is not None and self._cache.enabled:
            self._cache.warm(self._conn, identity)  # likewise: no matrix read in a timed call
        self._checker = Fts5Checker()

    async def run(self, plan: SearchPlan) -> float:
        """Execute and fetch every row."""
        started = time.perf_counter()
        self._fetch(self._conn, plan, self._index, self._checker, self._cache, self._lexical)
        return time.perf_counter() - started

    async def close(self) -> None:
        """Close the connection."""
        self._checker.close()
        self._conn.close()

    def counters(self) -> str:
        """Searches ranked from the lexical cache, and the cache's figures."""
        stats = self._lexical.stats()
        return (f"lexical cache: {stats.served} searches ranked in process, "
                f"{stats.fallbacks} in SQL for want of room, {stats.loads} project loads")

    async def agreement(self, plans: Sequence[SearchPlan]) -> str:
        """Each plan's page from the lexical cache's ranking against the same page ranked in
        SQL: documents, order, every score, total and relaxation."""
        same = 0
        for plan in plans:
            pages = [
                self._page(plan, self._fetch(self._conn, plan, self._index, self._checker,
                                             self._cache, lexical))
                for lexical in (self._lexical, None)
            ]
            same += pages[0] == pages[1]
        return f"{same} of {len(plans)} pages identical to the SQL ranking's"


class PostgresStatement:
    """`service.store.postgres.search.run_search(conn, plan, timeout, cache, lexical)` on an
    asyncpg connection with the pool's session settings and codecs: the vector cache's
    candidates (service.store.postgres.vector_cache) or the lexical cache's ranking
    (lexical_cache.py), with the store's budgets, then the statement, timed together with
    turning the rows into a page, as the store runs them (without its pool and turns)."""

    description = (
        "service.store.postgres.search.run_search() (the vector cache's candidates or the "
        "lexical cache's ranking, then the statement) on an asyncpg connection with the "
        "pool's settings"
    )

    def __init__(
        self, conn: asyncpg.Connection, search: Any, pooled: Any, cache: Any, lexical: Any
    ) -> None:
        self._conn = conn
        self._search, self._pooled, self._cache, self._lexical = search, pooled, cache, lexical

    @classmethod
    async def open(
        cls, dsn: str, cache_bytes: int, lexical_bytes: int, identity: EmbeddingIdentity
    ) -> PostgresStatement:
        """Connect as the service's pool does, the caches read as its start-up reads them."""
        from service.store.postgres import search
        from service.store.postgres.lexical_cache import PgLexicalCache
        from service.store.postgres.pool import (
            Conn,
            PoolSettings,
            init_connection,
            server_settings,
        )
        from service.store.postgres.vector_cache import PgVectorCache

        conn = await asyncpg.connect(dsn, server_settings=server_settings(PoolSettings()))
        await init_connection(conn)
        lexical = PgLexicalCache(lexical_bytes)
        await lexical.warm(conn)  # as the store does when it opens
        pooled, vectors = Conn(conn, ()), PgVectorCache(cache_bytes)
        await vectors.warm(pooled, identity)  # likewise: no matrix read inside a timed call
        return cls(conn, search, pooled, vectors, lexical)

    async def run(self, plan: SearchPlan) -> float:
        """The store's run_search on this connection: candidates, then the statement."""
        started = time.perf_counter()
        await self._search.run_search(
            self._pooled, plan, plan.timeout, self._cache, self._lexical
        )
        return time.perf_counter() - started

    async def close(self) -> None:
        """Close the connection."""
        await self._conn.close()

    async def agreement(self, plans: Sequence[SearchPlan]) -> str:
        """Each plan's page from the lexical cache's ranking against the same page ranked in
        SQL (same connection, same vector candidates): documents, order, every score, total
        and relaxation."""
        same = 0
        for plan in plans:
            pages = [
                await self._search.run_search(self._pooled, plan, plan.timeout, self._cache, lex)
                for lex in (self._lexical, None)
            ]
            same += pages[0] == pages[1]
        return f"{same} of {len(plans)} pages identical to the SQL ranking's"

    def counters(self) -> str:
        """Searches the statement ranked from the lexical cache, and the cache's figures."""
        stats = self._lexical.stats()
        return (f"lexical cache: {self._lexical.served} searches ranked in process, "
                f"{stats.fallbacks} by SQL after a proposal, {stats.loads} project loads")


async def open_statement(
    settings: Settings, identity: EmbeddingIdentity
) -> tuple[Statement | None, str]:
    """The statement runner for the store, tried once per mode; or None and why not."""
    url = settings.database_url.reveal()
    statement: Statement | None = None
    try:
        if url:
            statement = await PostgresStatement.open(
                url, cache_budget(settings.pg_vector_cache_mb),
                cache_budget(settings.pg_lexical_cache_mb), identity,
            )
        else:
            statement = SqliteStatement(sqlite_path(url, settings.data_dir),
                                        cache_budget(settings.sqlite_vector_cache_mb),
                                        cache_budget(settings.sqlite_lexical_cache_mb),
                                        identity)
        probe = Query((1,), "probe words", np.zeros(identity.dimensions, dtype=np.float32))
        probe.vector[0] = 1.0
        for mode in Mode:
            await statement.run(search_plan(settings, identity, probe, mode))
    except Exception as error:  # an internal API that moved: skip the timing, say why
        if statement is not None:
            await statement.close()
        return None, f"statement timing skipped: {type(error).__name__}: {error}"[:500]
    return statement, ""
