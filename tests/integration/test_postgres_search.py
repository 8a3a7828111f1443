"""PostgreSQL search specifics: BM25 in SQL, tsquery failures, the HNSW path, timeouts."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from service import errors
from service.embeddings.deterministic import DeterministicEmbedder
from service.projects.lexical import LexicalQuery, compile_query
from service.store.base import Filters, Mode
from service.store.postgres import PostgresStore
from service.store.postgres.migrations import hnsw_index_name
from service.store.postgres.search import build
from service.store.postgres.search_sql import numbered
from tests.integration.conftest import Corpus, Doc, keys
from tests.support.pg import fresh_database

pytestmark = pytest.mark.postgres


@pytest_asyncio.fixture
async def pg(pg_dsn: str, embedder: DeterministicEmbedder) -> AsyncIterator[Corpus]:
    """A corpus on a fresh PostgreSQL store whose HNSW maintenance runs only when asked."""
    async with fresh_database(pg_dsn) as dsn:
        store = PostgresStore(dsn, embedder.identity, ann_maintenance=False)
        await store.open()
        try:
            yield Corpus(store, embedder, "acme")
        finally:
            await store.close()


def _lexical(
    tsquery: str | None, relaxed: str | None = None, script: str | None = None
) -> LexicalQuery:
    return LexicalQuery(
        fts5=None,
        fts5_relaxed=None,
        tsquery=tsquery,
        tsquery_relaxed=relaxed,
        script_tsquery=script,
        terms=(),
        explicit=relaxed is None,
    )


async def test_bm25_prefers_frequent_rare_terms_in_short_documents(pg: Corpus) -> None:
    (project,) = await pg.projects(1)
    await pg.write(
        project.project_id,
        [
            Doc("note", "often", "quasar quasar quasar orbit"),
            Doc("note", "once", "quasar orbit"),
            Doc("note", "long", "quasar orbit " + "filler words here " * 30),
            Doc("note", "common", "orbit orbit orbit orbit"),
            *[Doc("note", f"bulk{i}", f"orbit plain text {i}") for i in range(6)],
        ],
    )
    page = await pg.search([project.project_id], Mode.FTS, "quasar orbit")
    order = [h.row_id for h in page.hits]
    assert order[:3] == ["often", "once", "long"], order
    # Two words relax too (issue 16): the orbit-only documents follow, in a second tier.
    assert (page.total, page.relaxed) == (10, True)

    # "quasar" is rare and "orbit" common: a quasar-only match beats an orbit-only one.
    relaxed = await pg.search([project.project_id], Mode.FTS, "quasar orbit nebula")
    assert relaxed.relaxed is True
    ranked = [h.row_id for h in relaxed.hits]
    assert ranked.index("once") < ranked.index("common")
    scores = [h.fts_score for h in relaxed.hits]
    assert scores == sorted(scores, reverse=True)
    assert relaxed.hits[0].fts_normalized == pytest.approx(1.0)


async def test_bm25_statistics_come_from_the_scope(pg: Corpus) -> None:
    small, large = await pg.projects(2)
    await pg.write(small.project_id, [Doc("note", "a", "zephyr wind"), Doc("note", "b", "calm")])
    await pg.write(large.project_id, [Doc("note", str(i), "zephyr breeze") for i in range(20)])
    alone = await pg.search([small.project_id], Mode.FTS, "zephyr")
    together = await pg.search([small.project_id, large.project_id], Mode.FTS, "zephyr")
    score_alone = alone.hits[0].fts_score
    score_together = next(h.fts_score for h in together.hits if h.project_id == small.project_id)
    # The term is common across both projects: its idf (and the score) drops.
    assert score_together < score_alone


@pytest.mark.parametrize("mode", [Mode.FTS, Mode.HYBRID])
@pytest.mark.parametrize(
    "tsquery",
    ["foo & (bar", "&&", "'unterminated", "a <-> <-> b", "!", "()", "x:Z*", "'a' & & 'b'"],
)
async def test_malformed_tsquery_never_raises(pg: Corpus, mode: Mode, tsquery: str) -> None:
    (project,) = await pg.projects(1)
    await pg.write(project.project_id, [Doc("note", "1", "foo bar baz")])
    plan = await pg.plan([project.project_id], mode, "foo bar", lexical=_lexical(tsquery))
    page, statements = await pg.counted(plan)
    assert len(statements) == 1
    if mode is Mode.FTS:
        assert (page.hits, page.total, page.relaxed) == ((), 0, False)
    else:
        assert [h.row_id for h in page.hits] == ["1"]
        assert page.hits[0].fts_score == 0


async def test_malformed_strict_form_falls_back_to_relaxed_in_the_same_statement(
    pg: Corpus,
) -> None:
    (project,) = await pg.projects(1)
    await pg.write(project.project_id, [Doc("note", "1", "foo"), Doc("note", "2", "bar bar")])
    lexical = _lexical("foo & (bar", relaxed="'foo':* | 'bar':*")
    plan = await pg.plan([project.project_id], Mode.FTS, "foo bar", lexical=lexical)
    page, statements = await pg.counted(plan)
    assert len(statements) == 1
    assert page.relaxed is True
    assert page.total == 2
    assert sorted(h.row_id for h in page.hits) == ["1", "2"]


async def test_bad_script_query_disables_the_strict_form_only(pg: Corpus) -> None:
    (project,) = await pg.projects(1)
    await pg.write(project.project_id, [Doc("note", "1", "适者生存 foo")])
    lexical = dataclasses.replace(compile_query("适者生存"), script_tsquery="'适者' <-> (")
    page = await pg.search([project.project_id], Mode.FTS, "适者生存", lexical=lexical)
    assert (page.hits, page.total) == ((), 0)
    good = await pg.search([project.project_id], Mode.FTS, "适者生存")
    assert [h.row_id for h in good.hits] == ["1"]


async def test_prefix_terms_match_longer_lexemes(pg: Corpus) -> None:
    (project,) = await pg.projects(1)
    await pg.write(
        project.project_id,
        [Doc("note", "1", "astronomical observations"), Doc("note", "2", "astronomy")],
    )
    page = await pg.search([project.project_id], Mode.FTS, "astronom*")
    assert sorted(h.row_id for h in page.hits) == ["1", "2"]
    assert all(h.fts_score > 0 for h in page.hits)


async def _galaxies(pg: Corpus) -> list[int]:
    projects = await pg.projects(2)
    for n, project in enumerate(projects):
        await pg.write(
            project.project_id,
            [
                Doc("note", str(i), f"galaxy cluster {i}\n\n{'redshift ' * (i % 4)} survey {n}")
                for i in range(15)
            ],
        )
    return [p.project_id for p in projects]


@pytest.mark.parametrize("drained", [False, True])
async def test_hnsw_path_matches_exact_scan_with_or_without_backlog(
    pg: Corpus, drained: bool
) -> None:
    scope = await _galaxies(pg)
    store = pg.store
    assert isinstance(store, PostgresStore)
    if drained:
        assert await store.index_ann_backlog() == 60
    for mode in (Mode.VECTOR, Mode.HYBRID):
        exact = await pg.search(scope, mode, "galaxy redshift", limit=12, include_chunks=True)
        plan = await pg.plan(
            scope, mode, "galaxy redshift", limit=12, include_chunks=True, exact_scan_limit=10
        )
        approximate, statements = await pg.counted(plan)
        assert len(statements) == 1
        assert exact.ranking_is_exact
        assert not approximate.ranking_is_exact
        assert keys(approximate.hits) == keys(exact.hits)
        assert [h.chunks for h in approximate.hits] == [h.chunks for h in exact.hits]


async def test_hnsw_index_serves_the_approximate_path(pg: Corpus) -> None:
    scope = await _galaxies(pg)
    store = pg.store
    assert isinstance(store, PostgresStore)
    await store.index_ann_backlog()
    plan = await pg.plan(scope, Mode.VECTOR, "galaxy", exact_scan_limit=0)
    sql, bindings = build(plan)
    text, args = numbered(sql, bindings)
    dsn = store.dsn
    conn = await asyncpg.connect(dsn, server_settings={"plan_cache_mode": "force_custom_plan"})
    try:
        from pgvector.asyncpg import register_vector

        await register_vector(conn)
        await conn.execute("SET enable_seqscan = off")  # a tiny table would not need HNSW
        lines = [r[0] for r in await conn.fetch("EXPLAIN " + text, *args)]
    finally:
        await conn.close()
    assert any(hnsw_index_name(pg.identity) in line for line in lines), "\n".join(lines)


@pytest.mark.parametrize("mode", [Mode.VECTOR, Mode.HYBRID])
async def test_hnsw_path_keeps_to_owned_projects_and_filters(pg: Corpus, mode: Mode) -> None:
    scope = await _galaxies(pg)
    stranger = await pg.project("elsewhere", tenant="other-tenant")
    await pg.write(stranger.project_id, [Doc("note", "1", "galaxy redshift redshift")])
    store = pg.store
    assert isinstance(store, PostgresStore)
    await store.index_ann_backlog()
    # The store re-checks ownership itself, also on the HNSW path (the service checks first).
    plan = await pg.plan([*scope, stranger.project_id], mode, "galaxy redshift", exact_scan_limit=0)
    page = await store.search(plan)
    assert not page.ranking_is_exact
    assert page.hits
    assert {h.project_id for h in page.hits} <= set(scope)
    kinds = Filters(kinds=("observation",))
    await pg.write(scope[0], [Doc("observation", "9", "galaxy redshift survey")])
    await store.index_ann_backlog()
    filtered = await pg.search(scope, mode, "galaxy redshift", filters=kinds, exact_scan_limit=0)
    assert [(h.kind, h.row_id) for h in filtered.hits] == [("observation", "9")]


async def test_statement_timeout_is_deadline_exceeded(pg: Corpus) -> None:
    scope = await _galaxies(pg)
    with pytest.raises(errors.DeadlineExceeded):
        await pg.search(scope, Mode.HYBRID, "galaxy redshift", timeout=1e-6)
    page = await pg.search(scope, Mode.HYBRID, "galaxy redshift")
    assert page.hits


async def test_nul_bytes_are_stripped(pg: Corpus) -> None:
    (project,) = await pg.projects(1)
    doc = Doc(
        "note",
        "1",
        "bo\x00dy comet",
        title="ti\x00tle",
        path="a/\x00b.md",
        metadata={"k\x00": "v\x00", "list": ["x\x00"]},
    )
    await pg.write(project.project_id, [doc])
    page = await pg.search([project.project_id], Mode.HYBRID, "comet", include_chunks=True)
    (hit,) = page.hits
    assert (hit.title, hit.path, hit.snippet) == ("title", "a/b.md", "body comet")
    assert hit.metadata == {"k": "v", "list": ["x"]}
    assert hit.chunks[0].text == "body comet"
