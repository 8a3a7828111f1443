"""PostgreSQL write path: concurrency, outcomes, limits, HNSW backlog, throughput (printed)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from service.embeddings.deterministic import DeterministicEmbedder
from service.indexing.documents import IncomingDocument
from service.indexing.pipeline import Indexer
from service.store.base import Mode
from service.store.postgres import PostgresStore
from service.store.postgres.migrations import FTS_BODY_CHARS
from tests.integration.conftest import Corpus, Doc, at
from tests.support.pg import fresh_database

pytestmark = pytest.mark.postgres


@pytest_asyncio.fixture
async def pg(pg_dsn: str, embedder: DeterministicEmbedder) -> AsyncIterator[Corpus]:
    """A corpus on a fresh PostgreSQL store without background HNSW maintenance."""
    async with fresh_database(pg_dsn) as dsn:
        store = PostgresStore(dsn, embedder.identity, ann_maintenance=False)
        await store.open()
        try:
            yield Corpus(store, embedder, "acme")
        finally:
            await store.close()


def _dsn(corpus: Corpus) -> str:
    store = corpus.store
    assert isinstance(store, PostgresStore)
    return store.dsn


async def _count(corpus: Corpus, sql: str) -> int:
    conn = await asyncpg.connect(_dsn(corpus))
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


async def test_concurrent_replacements_of_one_document_never_mix(pg: Corpus) -> None:
    (project,) = await pg.projects(1)
    versions = [
        Doc("note", "1", "\n\n".join(f"version {v} part {i}" for i in range(v + 1)))
        for v in range(6)
    ]
    outcomes = await asyncio.gather(*(pg.write(project.project_id, [d]) for d in versions))
    assert sorted(o[0] for o in outcomes) == ["created"] + ["updated"] * 5
    page = await pg.search([project.project_id], Mode.HYBRID, "version part", include_chunks=True)
    (hit,) = page.hits
    version = int(hit.snippet.split()[1])
    chunk_count = await _count(pg, "SELECT count(*) FROM chunks")
    vector_count = await _count(pg, "SELECT count(*) FROM vectors")
    assert chunk_count == vector_count == version + 1


async def test_outcomes_duplicates_and_created_at(pg: Corpus) -> None:
    (project,) = await pg.projects(1)
    first = Doc("note", "1", "alpha", created_at=at(2), updated_at=at(3))
    assert await pg.write(project.project_id, [first]) == ["created"]
    again = Doc("note", "1", "beta")  # no times: keeps created_at, updated_at becomes now
    twice = Doc("note", "2", "gamma")
    outcomes = await pg.write(project.project_id, [again, twice, Doc("note", "2", "delta")])
    assert outcomes == ["updated", "created", "updated"]
    page = await pg.search([project.project_id], Mode.FTS, "")
    by_id = {h.row_id: h for h in page.hits}
    assert by_id["1"].created_at == at(2)
    assert by_id["1"].updated_at > at(3)
    assert by_id["2"].snippet == "delta"


async def test_body_beyond_the_tsvector_limit_is_stored_but_not_indexed(pg: Corpus) -> None:
    (project,) = await pg.projects(1)
    filler = "lorem ipsum dolor sit amet " * (FTS_BODY_CHARS // 20)
    body = "zebrafirst " + filler + " zebralast"
    await pg.write(project.project_id, [Doc("note", "1", body)])
    first = await pg.search([project.project_id], Mode.FTS, "zebrafirst")
    last = await pg.search([project.project_id], Mode.FTS, "zebralast")
    assert (first.total, last.total) == (1, 0)


async def test_deleted_documents_take_chunks_and_vectors(pg: Corpus) -> None:
    (project,) = await pg.projects(1)
    await pg.write(project.project_id, [Doc("note", str(i), f"a {i}\n\nb {i}") for i in range(4)])
    assert await pg.store.delete_documents(
        "acme", project.project_id, [("note", "1"), ("note", "9")]
    ) == 1
    assert await _count(pg, "SELECT count(*) FROM chunks") == 6
    assert await _count(pg, "SELECT count(*) FROM vectors") == 6
    assert await pg.store.delete_project("acme", project.project_id) == 3
    assert await _count(pg, "SELECT count(*) FROM vectors") == 0


async def test_hnsw_backlog_is_drained_in_the_background(
    pg_dsn: str, embedder: DeterministicEmbedder
) -> None:
    async with fresh_database(pg_dsn) as dsn:
        store = PostgresStore(dsn, embedder.identity)
        await store.open()
        try:
            corpus = Corpus(store, embedder, "acme")
            (project,) = await corpus.projects(1)
            await corpus.write(
                project.project_id, [Doc("note", str(i), f"x {i}") for i in range(5)]
            )
            for _ in range(100):
                if await _count(corpus, "SELECT count(*) FROM vectors WHERE NOT ann") == 0:
                    break
                await asyncio.sleep(0.1)
            assert await _count(corpus, "SELECT count(*) FROM vectors WHERE ann") == 5
        finally:
            await store.close()


def _documents(count: int) -> list[IncomingDocument]:
    rng = random.Random(7)
    words = [f"w{i}" for i in range(4000)]
    return [
        IncomingDocument(
            kind="note",
            row_id=str(i),
            title=f"note {i}",
            path=f"notes/{i}.md",
            body="\n\n".join(" ".join(rng.choices(words, k=130)) for _ in range(3)),
            category="",
            note_type="note",
            metadata={"i": i},
            created_at=None,
            updated_at=None,
        )
        for i in range(count)
    ]


async def test_write_throughput_is_reported(
    pg: Corpus, embedder: DeterministicEmbedder, capsys: pytest.CaptureFixture[str]
) -> None:
    (project,) = await pg.projects(1)
    indexer = Indexer(pg.store, embedder)
    documents = _documents(1200)
    chunks = 0
    started = time.perf_counter()
    for start in range(0, len(documents), 200):
        batch = list(enumerate(documents[start : start + 200]))
        report = await indexer.upsert("acme", project.project_id, batch, "bench")
        chunks += report.chunks_written
    elapsed = time.perf_counter() - started
    store = pg.store
    assert isinstance(store, PostgresStore)
    drain_started = time.perf_counter()
    indexed = await store.index_ann_backlog()
    drain = time.perf_counter() - drain_started
    with capsys.disabled():
        print(
            f"\n[postgres write] {len(documents)} documents, {chunks} chunks in {elapsed:.2f} s:"
            f" {chunks / elapsed:,.0f} chunks/s, {len(documents) / elapsed:,.0f} documents/s"
            f" (deterministic embedder, HNSW deferred); HNSW backlog {indexed} vectors in"
            f" {drain:.2f} s: {indexed / drain:,.0f} vectors/s"
        )
    assert chunks == 3 * len(documents) == indexed


@pytest.mark.parametrize(
    ("vector", "problem"),
    [([0.1] * 3, "values"), ([float("nan")] * 384, "NaN")],
)
async def test_bad_supplied_vectors_are_invalid_arguments(
    pg: Corpus, vector: list[float], problem: str
) -> None:
    import dataclasses

    from service import errors

    (project,) = await pg.projects(1)
    write = await pg.document_write(Doc("note", "1", "comet"))
    chunk = dataclasses.replace(write.chunks[0], vector=vector)
    with pytest.raises(errors.InvalidArgument, match=problem):
        await pg.store.write_documents(
            "acme",
            project.project_id, [dataclasses.replace(write, chunks=[chunk])]
        )
    assert await _count(pg, "SELECT count(*) FROM documents") == 0


async def test_delete_project_always_ends_beside_concurrent_upserts_and_deletes(
    pg: Corpus,
) -> None:
    """It deadlocked with a concurrent DeleteDocuments in 7 of 15 rounds (issue 17 item 11),
    surfacing as UNAVAILABLE; now the project row is locked first and a deadlock retried."""
    from service import errors

    rng = random.Random(11)
    for _ in range(6):
        (project,) = await pg.projects(1)
        pid = project.project_id
        docs = [Doc("note", str(i), f"round body {i}\n\nmore {i}") for i in range(40)]
        await pg.write(pid, docs)

        async def churn(pid: int = pid, docs: list[Doc] = docs) -> None:
            for _ in range(6):
                picked = rng.sample(docs, 10)
                try:
                    if rng.random() < 0.5:
                        await pg.store.delete_documents(
                            "acme", pid, [(d.kind, d.row_id) for d in reversed(picked)])
                    else:
                        await pg.write(pid, picked)
                except errors.NotFound:
                    return  # the project is gone: what a caller sees after the delete
                except errors.Unavailable:
                    # Two writers of the same documents in opposite orders can deadlock
                    # each other: one gets UNAVAILABLE, which callers retry.
                    continue

        async def delete(pid: int = pid) -> int | None:
            await asyncio.sleep(rng.random() * 0.02)
            return await pg.store.delete_project("acme", pid)

        *_, deleted = await asyncio.gather(churn(), churn(), churn(), delete())
        assert deleted is not None
        left = await pg.store.list_projects("acme", pid - 1, 1)
        assert pid not in [p.project_id for p in left]
