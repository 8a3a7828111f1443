"""PostgreSQL schema: versioned migrations (idempotent, concurrent), keys, the HNSW index."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from service.embeddings.base import EmbeddingIdentity
from service.store.postgres import PostgresStore
from service.store.postgres.migrations import MIGRATIONS, hnsw_index_name
from tests.support.pg import fresh_database

pytestmark = pytest.mark.postgres

IDENTITY = EmbeddingIdentity("deterministic-hash-v1", 384)
# Every index of a content table, with its first key column and access method.
INDEX_HEADS = """
SELECT c.relname AS table_name, i.relname AS index_name, am.amname AS method,
       pg_get_indexdef(x.indexrelid, 1, true) AS first_column
FROM pg_index AS x
JOIN pg_class AS i ON i.oid = x.indexrelid
JOIN pg_class AS c ON c.oid = x.indrelid
JOIN pg_am AS am ON am.oid = i.relam
WHERE c.relname IN ('documents', 'chunks', 'vectors')
ORDER BY 1, 2"""


@pytest_asyncio.fixture
async def dsn(pg_dsn: str) -> AsyncIterator[str]:
    """A new, empty database for each test."""
    async with fresh_database(pg_dsn) as database:
        yield database


async def _fetch(dsn: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


async def test_migrations_are_versioned_and_idempotent(dsn: str) -> None:
    store = PostgresStore(dsn, IDENTITY)
    await store.open()
    project = await store.create_project("acme", "p1", "one")
    await store.close()

    again = PostgresStore(dsn, IDENTITY)
    await again.open()
    try:
        assert await again.get_projects("acme", [project.project_id]) == [project]
    finally:
        await again.close()
    rows = await _fetch(dsn, "SELECT version FROM schema_migrations ORDER BY version")
    assert [r["version"] for r in rows] == [m.version for m in MIGRATIONS]


async def test_replicas_opening_together_migrate_once(dsn: str) -> None:
    stores = [PostgresStore(dsn, IDENTITY, min_size=1, max_size=2) for _ in range(4)]
    await asyncio.gather(*(store.open() for store in stores))
    try:
        created = await asyncio.gather(
            *(s.create_project("acme", f"p{i}", "x") for i, s in enumerate(stores))
        )
        assert len({p.project_id for p in created}) == 4
    finally:
        await asyncio.gather(*(store.close() for store in stores))
    versions = await _fetch(dsn, "SELECT version FROM schema_migrations")
    assert len(versions) == len(MIGRATIONS)
    hnsw = await _fetch(
        dsn, "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'vectors_hnsw%'"
    )
    assert [r["indexname"] for r in hnsw] == [hnsw_index_name(IDENTITY)]


async def test_hnsw_index_per_identity_is_partial_on_model_and_dimensions(dsn: str) -> None:
    other = EmbeddingIdentity("other/model-with-'quote", 64)
    for identity in (IDENTITY, other, None):
        store = PostgresStore(dsn, identity)
        await store.open()
        await store.close()
    rows = await _fetch(
        dsn, "SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE 'vectors_hnsw%'"
    )
    definitions = {r["indexname"]: r["indexdef"] for r in rows}
    assert set(definitions) == {hnsw_index_name(IDENTITY), hnsw_index_name(other)}
    mine = definitions[hnsw_index_name(IDENTITY)]
    assert "USING hnsw" in mine
    assert "vector(384)" in mine
    assert "vector_cosine_ops" in mine
    assert "model = 'deterministic-hash-v1'::text" in mine
    assert "dimensions = 384" in mine
    assert "other/model-with-''quote" in definitions[hnsw_index_name(other)]


async def test_project_id_leads_every_btree_key(dsn: str) -> None:
    store = PostgresStore(dsn, IDENTITY)
    await store.open()
    await store.close()
    rows = await _fetch(dsn, INDEX_HEADS)
    assert rows
    for row in rows:
        if row["method"] == "btree":
            assert row["first_column"] == "project_id", dict(row)
        else:
            # GIN (tsvector) and HNSW indexes have no btree leading column; under hash
            # partitioning by project_id each partition carries its own.
            assert row["method"] in {"gin", "hnsw"}, dict(row)


async def test_open_fails_as_unavailable_when_the_server_is_unreachable() -> None:
    from service import errors

    store = PostgresStore("postgresql://postgres@/nowhere?host=/nonexistent-socket-dir")
    with pytest.raises(errors.Unavailable):
        await store.open()


@pytest.mark.parametrize("partitions", [0, 4])
async def test_postings_are_read_from_their_key_alone(dsn: str, partitions: int) -> None:
    """term_postings' key carries tf and dl (migration 4): once vacuum has marked the pages
    visible, a term's postings in a project are an index-only scan, no heap fetch."""
    store = PostgresStore(dsn, IDENTITY, partitions=partitions)
    await store.open()
    await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        included = await conn.fetch(
            "SELECT c.relname, x.indnkeyatts, x.indnatts FROM pg_index AS x"
            " JOIN pg_class AS c ON c.oid = x.indrelid JOIN pg_class AS i ON i.oid = x.indexrelid"
            " WHERE c.relname LIKE 'term_postings%' AND x.indisprimary"
        )
        assert len(included) == (partitions + 1 if partitions else 1)
        assert {(r["indnkeyatts"], r["indnatts"]) for r in included} == {(5, 7)}
        await conn.execute(
            "INSERT INTO term_postings SELECT 1 + g % 3, 0, 'w' || (g % 50), 'note', g::text, 1, 10"
            " FROM generate_series(1, 6000) AS g"
        )
        await conn.execute("VACUUM (ANALYZE) term_postings")
        await conn.execute("SET enable_seqscan = off")
        await conn.execute("SET enable_bitmapscan = off")
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                "EXPLAIN SELECT row_id, tf, dl FROM term_postings"
                " WHERE project_id = 1 AND chan = 0 AND lexeme = 'w7'"
            )
        )
        assert "Index Only Scan" in plan, plan
    finally:
        await conn.close()
