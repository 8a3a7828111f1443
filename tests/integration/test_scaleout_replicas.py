"""Stateless replicas: three server processes over one PostgreSQL, page tokens crossing them.

The processes share SEARCH_PAGE_TOKEN_KEY and SEARCH_DATABASE_URL and start together
(migrations serialise on the advisory lock). Pages are fetched round-robin, each with the
token another process issued; then a `round_robin` channel over the three addresses (what
`dns:///search-headless` resolves to in Kubernetes) keeps paging while one process is
SIGKILLed, and the client's UNAVAILABLE retries land on the survivors.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from benchmarks.reliability.process import ServerProcess, start_server
from search_client import (
    AsyncSearchClient,
    Document,
    ProjectSearchResult,
    RetryPolicy,
    SearchMode,
)
from tests.support.pg import fresh_database

pytestmark = pytest.mark.timeout(120)

KEY = base64.b64encode(b"scale-out-shared-page-token-key!").decode()
RETRY = RetryPolicy(max_attempts=6, initial_backoff=0.05, max_backoff=0.5)
ROUND_ROBIN = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})
WORDS = ("replica", "shard", "primary", "standby", "partition", "lag", "token", "page")
QUERIES = ((SearchMode.FTS, "replica"), (SearchMode.HYBRID, "replica standby lag"))
PAGE_SIZE = 4

Key = tuple[int, str, str, float]


def _corpus() -> list[Document]:
    docs = []
    for i in range(48):
        words = [WORDS[(i * k) % len(WORDS)] for k in range(1, 2 + i % 5)]
        body = " ".join(["replica", *words, f"note number {i}"] * (1 + i % 3))
        docs.append(Document("note", f"n{i:02d}", title=f"Note {i}", body=body))
    return docs


def _keys(results: Sequence[ProjectSearchResult]) -> list[Key]:
    return [(r.project_id, r.kind, r.row_id, round(r.scores.score, 9)) for r in results]


async def _one_page(
    client: AsyncSearchClient, project: int, mode: SearchMode, text: str, token: str,
    size: int = PAGE_SIZE,
) -> tuple[list[Key], str]:
    pages = [
        p async for p in client.search_projects(
            [project], text, mode=mode, page_size=size, page_token=token
        )
    ]
    assert len(pages) == 1
    page = pages[0]
    assert page.has_more == bool(page.next_page_token)
    if page.has_more:
        assert len(page.results) == size  # every page but the last is full
    return _keys(page.results), page.next_page_token


async def _paginate(
    clients: Sequence[AsyncSearchClient], project: int, mode: SearchMode, text: str,
    start: int = 0, on_page: asyncio.Event | None = None,
) -> list[Key]:
    """Every page; page n goes to clients[(start + n) % len(clients)]."""
    found: list[Key] = []
    token, n = "", start
    while True:
        keys, token = await _one_page(clients[n % len(clients)], project, mode, text, token)
        found += keys
        n += 1
        if on_page is not None:
            on_page.set()
        if not token:
            return found


async def _start_three(tmp_path: Path, dsn: str) -> list[ServerProcess]:
    env = {"SEARCH_DATABASE_URL": dsn, "SEARCH_PAGE_TOKEN_KEY": KEY, "SEARCH_DB_POOL_SIZE": "4"}
    return list(
        await asyncio.gather(*(start_server(tmp_path / name, env) for name in "abc"))
    )


async def test_pages_cross_replicas_and_survive_a_killed_replica(
    tmp_path: Path, pg_dsn: str
) -> None:
    async with AsyncExitStack() as stack:
        dsn = await stack.enter_async_context(fresh_database(pg_dsn))
        servers = await _start_three(tmp_path, dsn)
        for server in servers:
            stack.push_async_callback(server.stop)
        clients = [
            await stack.enter_async_context(AsyncSearchClient(s.target, retry=RETRY))
            for s in servers
        ]
        project = (await clients[0].create_project("scale-out", "Scale-out")).project_id
        summary = await clients[0].upsert_documents(project, _corpus())
        assert not summary.rejected

        expected = {}
        for mode, text in QUERIES:
            # One big page from the last process is the reference order.
            expected[mode], token = await _one_page(clients[2], project, mode, text, "", 1000)
            assert not token
            assert len(expected[mode]) > 3 * PAGE_SIZE
            for start in range(3):  # page 1 from A, 2 from B with A's token, ...
                assert await _paginate(clients, project, mode, text, start) == expected[mode]

        target = "ipv4:" + ",".join(s.target for s in servers)
        balanced = await stack.enter_async_context(AsyncSearchClient(
            target, retry=RETRY, options=[("grpc.service_config", ROUND_ROBIN)]
        ))
        await _kill_mid_run(balanced, servers[1], project, expected)


async def _kill_mid_run(
    client: AsyncSearchClient, victim: ServerProcess, project: int,
    expected: dict[SearchMode, list[Key]],
) -> None:
    """Concurrent paginations over the balanced channel; SIGKILL `victim` after some pages."""
    progress = asyncio.Event()
    pages_before_kill = 0

    async def worker(mode: SearchMode, text: str) -> None:
        for _ in range(4):
            assert await _paginate([client], project, mode, text, on_page=progress) == (
                expected[mode]
            )

    tasks = [asyncio.create_task(worker(m, t)) for m, t in QUERIES * 2]
    while pages_before_kill < 12:
        await progress.wait()
        progress.clear()
        pages_before_kill += 1
    victim.kill()
    assert not all(task.done() for task in tasks)  # the kill lands mid-run
    await asyncio.gather(*tasks)
    assert await victim.process.wait() == -9
