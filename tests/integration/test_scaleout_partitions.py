"""SEARCH_PG_PARTITIONS: content tables hash-partitioned by project, same results as without."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

from search_client import AsyncSearchClient, Document, SearchMode
from service.server import App
from tests.support.pg import fresh_database
from tests.support.server import running_server

PARTITIONS = 4
COUNT_PARTITIONS = """
SELECT p.relname::text AS parent, count(*) AS partitions
FROM pg_inherits AS i JOIN pg_class AS p ON p.oid = i.inhparent
WHERE p.relkind = 'p' GROUP BY p.relname ORDER BY p.relname"""
QUERIES = ((SearchMode.FTS, "replica"), (SearchMode.HYBRID, "replica lag"),
           (SearchMode.VECTOR, "partition standby"))


@asynccontextmanager
async def _server(
    pg_dsn: str, tmp_path: Path, partitions: int, exact_limit: int
) -> AsyncIterator[tuple[App, str]]:
    async with fresh_database(pg_dsn) as dsn:
        env = {
            "SEARCH_DATABASE_URL": dsn,
            "SEARCH_PG_PARTITIONS": str(partitions),
            "SEARCH_EXACT_SCAN_LIMIT": str(exact_limit),
        }
        async with running_server(tmp_path / f"{partitions}-{exact_limit}", env) as app:
            yield app, dsn


async def _results(app: App) -> list[list[tuple[str, str, float]]]:
    words = ("replica", "lag", "partition", "standby", "shard")
    out = []
    async with AsyncSearchClient(f"127.0.0.1:{app.port}") as client:
        projects = [(await client.create_project(f"p{i}", f"P{i}")).project_id for i in range(6)]
        for n, project in enumerate(projects):
            docs = [
                Document("note", f"n{i}", title=f"Note {i}",
                         body=f"replica {words[(i + n) % 5]} {words[i % 3]} number {i}")
                for i in range(12)
            ]
            assert not (await client.upsert_documents(project, docs)).rejected
        await app.components["store"].index_ann_backlog()
        for mode, text in QUERIES:
            for scope in (projects, projects[2:3]):
                pages = [p async for p in client.search_projects(
                    scope, text, mode=mode, page_size=200)]
                out.append([(r.project_external_id, r.row_id, round(r.scores.score, 9))
                            for r in pages[0].results])
    return out


@pytest.mark.parametrize("exact_limit", [10_000, 0], ids=["exact", "hnsw"])
async def test_partitioned_schema_answers_like_the_plain_one(
    pg_dsn: str, tmp_path: Path, exact_limit: int
) -> None:
    async with _server(pg_dsn, tmp_path, 0, exact_limit) as (plain, plain_dsn):
        expected = await _results(plain)
        conn = await asyncpg.connect(plain_dsn)
        try:
            assert await conn.fetch(COUNT_PARTITIONS) == []
        finally:
            await conn.close()
    async with _server(pg_dsn, tmp_path, PARTITIONS, exact_limit) as (app, dsn):
        assert await _results(app) == expected
        assert all(len(found) > 0 for found in expected)
        conn = await asyncpg.connect(dsn)
        try:
            rows = [tuple(r) for r in await conn.fetch(COUNT_PARTITIONS)]
            assert rows == [
                (t, PARTITIONS) for t in ("chunks", "documents", "term_postings", "vectors")
            ]
            # The HNSW index of the identity exists on the partitioned parent as well.
            hnsw = await conn.fetchval(
                "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'vectors_hnsw_%'"
            )
            assert hnsw >= 1
            storage = await conn.fetchval(
                "SELECT reloptions::text FROM pg_class WHERE relname = 'documents_p0'"
            )
            assert "toast_tuple_target=8160" in storage
        finally:
            await conn.close()
