"""What the PostgreSQL pool sends when a connection goes back (service/store/postgres/pool.py).

A search awaits the release of its connection before it returns. asyncpg's default reset is
a round trip at every release (`pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET
ALL`); the pool keeps the session instead, because the service leaves no session state. What
must still hold: a connection released inside a transaction comes back outside it, its
transaction rolled back.
"""

from __future__ import annotations

import pytest

from service.store.postgres.pool import Database, PoolSettings
from tests.support.pg import fresh_database

pytestmark = pytest.mark.postgres


async def test_a_release_sends_nothing_and_an_open_transaction_is_rolled_back(
    pg_dsn: str,
) -> None:
    async with fresh_database(pg_dsn) as dsn:
        db = Database(dsn, PoolSettings(min_size=1, max_size=1))
        await db.open()
        try:
            await db.run_unhooked(lambda c: c.execute("CREATE TABLE t (x int)"))
            sent: list[str] = []
            async with db.connection() as conn:
                conn.raw.add_query_logger(lambda record: sent.append(record.query))
                await conn.fetch("SELECT 1")
            assert sent == ["SELECT 1"]

            async with db.connection() as conn:
                await conn.execute("BEGIN")
                await conn.execute("INSERT INTO t VALUES (1)")
                assert conn.raw.is_in_transaction()
            async with db.connection() as conn:
                assert not conn.raw.is_in_transaction()
                assert await conn.fetchval("SELECT count(*) FROM t") == 0
        finally:
            await db.close()
