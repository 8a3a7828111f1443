"""PostgreSQL lexical postings: always what the tsvectors hold, and scores as before them.

The store scores from `term_postings` / `lexical_stats` (service.store.postgres.postings).
Checked here: after any sequence of writes, updates, deletes and project deletions (on a
plain and on a hash-partitioned schema) the postings are exactly `unnest(fts)` /
`unnest(ngram_fts)` of the documents and the statistics are the documents'; the migration
backfills both from existing documents; and a search returns the same hits, tiers, scores,
total and relaxation as the statement that read the documents' tsvectors (kept in
tests/support/pg_postings.py), for natural-language, explicit, numeric and CJK queries,
with and without filters; and each score is, to the bit, its terms' BM25 parts computed
from the raw postings and added in (chan, lexeme) order.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from service.embeddings.deterministic import DeterministicEmbedder
from service.projects.lexical import compile_query
from service.store.base import Filters, Mode, SearchPlan
from service.store.postgres import PostgresStore
from service.store.postgres import lexical_sql as lx
from service.store.postgres import search_sql as q
from service.store.postgres.search_sql import numbered
from tests.integration.conftest import Corpus, Doc
from tests.support.pg import fresh_database
from tests.support.pg_postings import old_fts_statement, postings_and_stats
from tests.support.postings_corpus import (
    QUERIES,
    random_writes,
    scored_projects,
    write_random_documents,
)

pytestmark = pytest.mark.postgres


async def _corpus(dsn: str, embedder: DeterministicEmbedder, partitions: int) -> PostgresStore:
    store = PostgresStore(dsn, embedder.identity, ann_maintenance=False, partitions=partitions)
    await store.open()
    return store


@pytest_asyncio.fixture(params=[0, 4], ids=["plain", "partitioned"])
async def pg(
    request: pytest.FixtureRequest, pg_dsn: str, embedder: DeterministicEmbedder
) -> AsyncIterator[tuple[Corpus, str]]:
    async with fresh_database(pg_dsn) as dsn:
        store = await _corpus(dsn, embedder, request.param)
        try:
            yield Corpus(store, embedder, "acme"), dsn
        finally:
            await store.close()


async def _check_postings(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        postings, expected, stats, documents = await postings_and_stats(conn)
    finally:
        await conn.close()
    assert postings == expected
    assert stats == documents


async def test_postings_follow_every_write(pg: tuple[Corpus, str]) -> None:
    """A seeded random sequence of creates, updates, deletes and project deletions."""
    corpus, dsn = pg
    await random_writes(corpus, random.Random(18), lambda: _check_postings(dsn))


async def test_migration_backfills_postings_of_existing_documents(
    pg: tuple[Corpus, str], embedder: DeterministicEmbedder
) -> None:
    corpus, dsn = pg
    rng = random.Random(3)
    for project in [p.project_id for p in await corpus.projects(2)]:
        for _ in range(5):
            await write_random_documents(corpus, rng, project)
    conn = await asyncpg.connect(dsn)
    try:
        partitions = await conn.fetchval(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'documents'::regclass"
        )
        # Back to the schema before migration 3, documents kept (5 adds to its table).
        await conn.execute("DROP TABLE term_postings, lexical_stats")
        await conn.execute("DELETE FROM schema_migrations WHERE version IN (3, 5)")
    finally:
        await conn.close()
    store = await _corpus(dsn, embedder, 0)  # the catalog, not the setting, partitions
    await store.close()
    await _check_postings(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'term_postings'::regclass"
            )
            == partitions
        )
    finally:
        await conn.close()


async def test_migration_backfills_chunk_counts(
    pg: tuple[Corpus, str], embedder: DeterministicEmbedder
) -> None:
    """Migration 5 counts each project's existing chunks into lexical_stats."""
    corpus, dsn = pg
    rng = random.Random(5)
    for project in [p.project_id for p in await corpus.projects(2)]:
        for _ in range(3):
            await write_random_documents(corpus, rng, project)
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT sum(chunks) FROM lexical_stats") > 0
        await conn.execute("ALTER TABLE lexical_stats DROP COLUMN chunks")
        await conn.execute("DELETE FROM schema_migrations WHERE version = 5")
    finally:
        await conn.close()
    store = await _corpus(dsn, embedder, 0)
    await store.close()
    await _check_postings(dsn)


async def test_the_vector_generation_moves_with_every_vector_change(
    pg: tuple[Corpus, str],
) -> None:
    """lexical_stats.vgen (what the vector cache is checked against) moves with each write
    or delete that inserts or removes a vector, and with any in-place change of a vector's
    content, never with the HNSW bookkeeping (`ann`)."""
    corpus, dsn = pg
    project = (await corpus.project("gen")).project_id
    conn = await asyncpg.connect(dsn)
    generation = "SELECT COALESCE((SELECT vgen FROM lexical_stats WHERE project_id = $1), 0)"
    try:
        seen = [await conn.fetchval(generation, project)]

        async def step() -> None:
            seen.append(await conn.fetchval(generation, project))

        await corpus.write(project, [Doc("note", "a", "comet orbit"), Doc("note", "b", "dust")])
        await step()
        await corpus.write(project, [Doc("note", "a", "orbit comet")])  # every length the same
        await step()
        await corpus.store.delete_documents(corpus.tenant, project, [("note", "b")])
        await step()
        await corpus.store.delete_documents(corpus.tenant, project, [("note", "zzz")])  # none
        await step()
        await conn.execute("UPDATE vectors SET ann = NOT ann WHERE project_id = $1", project)
        await step()
        await conn.execute(
            "UPDATE vectors SET state = 'pending', embedding = NULL WHERE project_id = $1", project
        )
        await step()
    finally:
        await conn.close()
    assert seen == [0, 1, 2, 3, 3, 3, 4]


async def _old_page(dsn: str, plan: SearchPlan) -> list[asyncpg.Record]:
    sql, bindings = old_fts_statement(plan)
    text, args = numbered(sql, bindings)
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(text, *args))
    finally:
        await conn.close()


@pytest.mark.parametrize("filtered", [False, True])
async def test_scores_equal_the_tsvector_statement(pg: tuple[Corpus, str], filtered: bool) -> None:
    corpus, dsn = pg
    projects = await scored_projects(corpus, random.Random(7))
    filters = Filters(kinds=("note",)) if filtered else Filters()
    for text in QUERIES:
        plan = await corpus.plan(projects[:2], Mode.FTS, text, filters=filters, limit=200)
        page = await corpus.store.search(plan)
        old = await _old_page(dsn, plan)
        assert page.total == old[0]["total"], text
        assert page.relaxed == old[0]["relaxed"], text
        expected = [r for r in old if r["project_id"] is not None]
        assert [(h.project_id, h.kind, h.row_id) for h in page.hits] == [
            (r["project_id"], r["kind"], r["row_id"]) for r in expected
        ], text
        for hit, row in zip(page.hits, expected, strict=True):
            assert hit.fts_score == pytest.approx(row["fts_score"], rel=1e-12), text
        assert page.hits or text == "runbook NOT friday" or filtered, text


# The store's own fragments for the query's terms and the scope's N and mean lengths.
_TERMS = "WITH" + lx.LEXICAL_INPUT + lx.QUERY_TERMS.rstrip(",")
_TERMS += " SELECT chan, lexeme, prefix FROM qterms"
_STATS = "WITH" + q.OWNED + lx.SCOPE_STATS.rstrip(",")
_STATS += " SELECT n, avgdl, avgnl FROM stats"
# One BM25 part per (df, tf, dl, mean length), in the store's expression and types.
_PARTS = """
SELECT ln(1.0 + ($1::float8 - u.df + 0.5) / (u.df + 0.5)) * u.tf * ($2::float8 + 1.0)
       / (u.tf + $2::float8 * (1.0 - $3::float8 + $3::float8 * u.dl / u.avg))
FROM unnest($4::float8[], $5::float8[], $6::int[], $7::float8[]) WITH ORDINALITY
     AS u(df, tf, dl, avg, i)
ORDER BY u.i"""


async def _expected_scores(
    conn: asyncpg.Connection, plan: SearchPlan
) -> dict[tuple[int, str, str], float]:
    """Each scope document's BM25 from its raw postings, parts added in (chan, lexeme) order."""
    lexical = plan.lexical
    assert lexical is not None
    text, args = numbered(
        _TERMS,
        {
            "tsq": lexical.tsquery,
            "script_tsq": lexical.script_tsquery,
            "tsq_relaxed": lexical.tsquery_relaxed,
        },
    )
    terms = sorted(await conn.fetch(text, *args), key=lambda t: (t[0], t[1].encode()))
    text, args = numbered(_STATS, {"tenant": plan.tenant, "scope": list(plan.project_ids)})
    n, avgdl, avgnl = await conn.fetchrow(text, *args)
    postings = await conn.fetch(
        "SELECT project_id, chan, lexeme, kind, row_id, tf, dl FROM term_postings"
        " WHERE project_id = ANY($1::bigint[])",
        list(plan.project_ids),
    )
    parts: dict[tuple[int, str, str], list[tuple[float, float, int, float]]] = {}
    for chan, lexeme, prefix in terms:
        held: dict[tuple[int, str, str], tuple[float, int]] = {}
        for project, p_chan, p_lexeme, kind, row, tf, dl in postings:
            if p_chan != chan or not (
                p_lexeme == lexeme or (prefix and p_lexeme.startswith(lexeme))
            ):
                continue
            doc = (project, kind, row)
            old_tf, old_dl = held.get(doc, (0.0, 0))
            exact_tf = float(tf) if p_lexeme == lexeme else old_tf
            held[doc] = (exact_tf, max(old_dl, dl))
        for doc, (tf, dl) in held.items():
            mean = avgdl if chan == 0 else avgnl
            parts.setdefault(doc, []).append((float(len(held)), tf or 1.0, dl, mean))
    scores = {}
    for doc, inputs in parts.items():
        values = await conn.fetch(
            _PARTS, n, plan.bm25_k1, plan.bm25_b, *(list(col) for col in zip(*inputs, strict=True))
        )
        score = values[0][0]
        for (part,) in values[1:]:
            score += part  # sum(float8) adds left to right from its first value
        scores[doc] = score
    return scores


async def test_scores_add_the_terms_in_one_order(pg: tuple[Corpus, str]) -> None:
    """Scores equal, to the bit, their parts added in (chan, lexeme) order: one order for
    every document, whatever the statement's plan (equal parts never tie an ulp apart)."""
    corpus, dsn = pg
    projects = await scored_projects(corpus, random.Random(11))
    conn = await asyncpg.connect(dsn)
    try:
        for text in QUERIES:
            plan = await corpus.plan(projects, Mode.FTS, text, limit=200)
            page = await corpus.store.search(plan)
            expected = await _expected_scores(conn, plan)
            for hit in page.hits:
                assert hit.fts_score == expected[(hit.project_id, hit.kind, hit.row_id)], text
    finally:
        await conn.close()


COUNTED = {
    "deploy freeze": True,
    "the start of the release": True,
    "run running": True,
    "release AND rollback": True,  # an AND of plain terms, no relaxed form
    "deploy OR café": True,
    "deplo*": True,
    "runbook NOT friday": False,  # a negation (querytree would hide it)
    '"deploy freeze"': False,  # a phrase
    "foo-bar alpha": False,  # the strict form holds a phrase
    "70803 el/1 config.json": False,
    "会議室 release": False,  # a script phrase
}


async def test_plain_shapes_are_counted_without_tsvectors(
    pg: tuple[Corpus, str],
) -> None:
    _, dsn = pg
    sql = "WITH" + lx.LEXICAL_INPUT + lx.QUERY_TERMS + lx.LEX_SHAPE.rstrip(",")
    sql += " SELECT by_count FROM lex_shape"
    conn = await asyncpg.connect(dsn)
    try:
        for query, counted in COUNTED.items():
            lexical = compile_query(query)
            text, args = numbered(
                sql,
                {
                    "tsq": lexical.tsquery,
                    "script_tsq": lexical.script_tsquery,
                    "tsq_relaxed": lexical.tsquery_relaxed,
                },
            )
            assert bool(await conn.fetchval(text, *args)) is counted, query
    finally:
        await conn.close()
