"""Failure mapping and recovery: a private PostgreSQL is restarted and stopped under a store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from service import errors
from service.embeddings.deterministic import DeterministicEmbedder
from service.store.base import Mode
from service.store.postgres import PostgresStore
from service.store.postgres.errors import translate
from tests.integration.conftest import Corpus, Doc
from tests.support.pg import PgServer, fresh_database

pytestmark = pytest.mark.postgres


@pytest_asyncio.fixture
async def corpus_on_private(
    private_pg_server: PgServer, embedder: DeterministicEmbedder
) -> AsyncIterator[Corpus]:
    """A corpus on a fresh database of the private server."""
    async with fresh_database(private_pg_server.dsn) as dsn:
        store = PostgresStore(dsn, embedder.identity, min_size=2, max_size=4)
        await store.open()
        try:
            yield Corpus(store, embedder, "acme")
        finally:
            await store.close()


async def _settle(store: PostgresStore, seconds: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        try:
            await store.ping()
            return
        except errors.Unavailable:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def test_pool_recovers_after_a_restart(
    corpus_on_private: Corpus, private_pg_server: PgServer
) -> None:
    corpus = corpus_on_private
    store = corpus.store
    assert isinstance(store, PostgresStore)
    (project,) = await corpus.projects(1)
    await corpus.write(project.project_id, [Doc("note", "1", "comet tail")])
    before = await corpus.search([project.project_id], Mode.HYBRID, "comet")

    await asyncio.to_thread(private_pg_server.restart)

    # Idle pooled connections died with the old server; reads retry once on a fresh one.
    after = await corpus.search([project.project_id], Mode.HYBRID, "comet")
    assert [h.row_id for h in after.hits] == [h.row_id for h in before.hits]
    await corpus.write(project.project_id, [Doc("note", "2", "comet head")])


async def test_server_down_is_unavailable_then_recovers(
    corpus_on_private: Corpus, private_pg_server: PgServer
) -> None:
    corpus = corpus_on_private
    store = corpus.store
    assert isinstance(store, PostgresStore)
    (project,) = await corpus.projects(1)

    await asyncio.to_thread(private_pg_server.stop)
    try:
        with pytest.raises(errors.Unavailable) as caught:
            await corpus.search([project.project_id], Mode.FTS, "comet")
        assert caught.value.retry_after
        with pytest.raises(errors.Unavailable):
            await corpus.write(project.project_id, [Doc("note", "1", "comet")])
        with pytest.raises(errors.Unavailable):
            await store.ping()
    finally:
        await asyncio.to_thread(private_pg_server.start)
    await _settle(store)
    await corpus.write(project.project_id, [Doc("note", "1", "comet")])
    page = await corpus.search([project.project_id], Mode.FTS, "comet")
    assert page.total == 1


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (asyncpg.exceptions.QueryCanceledError("canceling statement"), errors.DeadlineExceeded),
        (TimeoutError(), errors.DeadlineExceeded),
        (asyncpg.exceptions.AdminShutdownError("terminating"), errors.Unavailable),
        (asyncpg.exceptions.CannotConnectNowError("starting up"), errors.Unavailable),
        (asyncpg.exceptions.ConnectionDoesNotExistError("closed"), errors.Unavailable),
        (asyncpg.exceptions.TooManyConnectionsError("too many"), errors.Unavailable),
        (asyncpg.exceptions.DeadlockDetectedError("deadlock"), errors.Unavailable),
        (asyncpg.exceptions.InterfaceError("pool is closing"), errors.Unavailable),
        (ConnectionRefusedError(), errors.Unavailable),
        (FileNotFoundError(), errors.Unavailable),
    ],
)
def test_database_errors_map_by_class(exc: BaseException, expected: type[Exception]) -> None:
    assert isinstance(translate(exc), expected)


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.exceptions.UndefinedColumnError("bug"),
        asyncpg.exceptions.InterfaceError("another operation is in progress"),
        ValueError("bug"),
    ],
)
def test_bugs_are_not_disguised(exc: BaseException) -> None:
    assert translate(exc) is None
