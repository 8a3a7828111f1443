"""SQLite search statements are prepared once per connection, not once per search.

SQLite's planner reads the bound value of a bare `LIMIT ?` / `OFFSET ?`, and a statement
whose plan read a bound value expires whenever that parameter is bound again: every search
re-prepared its whole statement (~1.3 ms for the 4 kB FTS statement, more than a small
search's own work). Preparation is observable through the authorizer, which SQLite calls
while compiling a statement and never while running one; setting it expires the connection's
statements once, so the first run after it compiles and the next must not. Every shape:
FTS lexical shapes, VECTOR/HYBRID exact and KNN (vec0 and the vector cache's candidates),
with and without filters.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import apsw

from service.embeddings.deterministic import DeterministicEmbedder
from service.store.base import Filters, Fusion, Mode, SearchPage, SearchPlan
from service.store.sqlite.connection import connect
from service.store.sqlite.lexical_check import Fts5Checker
from service.store.sqlite.schema import VectorIndex
from service.store.sqlite.search import build, run_search
from service.store.sqlite.vector_cache import VectorCache
from tests.integration.conftest import Corpus
from tests.support.postings_corpus import QUERIES, scored_projects

SHADOW_TABLES = ("docs_fts_", "vec_chunks_")


def _compilations(conn: apsw.Connection, run: Any) -> int:
    """How many column reads SQLite compiled while `run()` ran on `conn` a second time.

    FTS5 and sqlite-vec prepare small statements of their own on their shadow tables
    (`docs_fts_*`, `vec_chunks_*`); those are theirs, not the search statement's."""
    actions: list[str] = []

    def authorizer(action: int, table: str | None, *_: Any) -> int:
        if action == apsw.SQLITE_READ and not (table or "").startswith(SHADOW_TABLES):
            actions.append(table or "")
        return apsw.SQLITE_OK

    conn.authorizer = authorizer
    try:
        run()  # compiles: setting an authorizer expired every prepared statement
        actions.clear()
        run()
    finally:
        conn.authorizer = None
    return len(actions)


async def _plans(corpus: Corpus, projects: list[int]) -> list[SearchPlan]:
    plans = []
    for text in QUERIES:
        for filters in (Filters(), Filters(kinds=("note",))):
            plans.append(await corpus.plan(projects, Mode.FTS, text, filters=filters, limit=5))
    semantic = ((Mode.VECTOR, Fusion.RRF), (Mode.HYBRID, Fusion.RRF), (Mode.HYBRID, Fusion.MAX_MIN))
    for mode, fusion in semantic:
        for exact_scan_limit in (10_000, 0):  # the exact scan, and the KNN path
            for filters in (Filters(), Filters(kinds=("note",))):
                plans.append(
                    await corpus.plan(
                        projects,
                        mode,
                        "deploy freeze friday",
                        filters=filters,
                        limit=5,
                        offset=3,
                        fusion=fusion,
                        exact_scan_limit=exact_scan_limit,
                        include_chunks=True,
                    )
                )
    return plans


async def test_search_statements_are_not_prepared_again(
    sqlite_corpus: tuple[Corpus, Path], embedder: DeterministicEmbedder
) -> None:
    corpus, path = sqlite_corpus
    projects = await scored_projects(corpus, random.Random(3))
    plans = await _plans(corpus, projects[:2])
    conn, support = connect(path, True, reader=True)
    assert support.loaded
    index = VectorIndex(embedder.identity, True)
    checker = Fts5Checker()
    try:
        caches = [None, VectorCache(1 << 26)]  # KNN candidates from vec0, or the cache's
        for plan, cache in [(plan, cache) for cache in caches for plan in plans]:
            pages: list[SearchPage] = []

            def search(
                plan: SearchPlan = plan,
                pages: list[SearchPage] = pages,
                cache: VectorCache | None = cache,
            ) -> None:
                pages.append(run_search(conn, plan, index, checker, None, cache))

            compiled = _compilations(conn, search)
            assert compiled == 0, (plan.mode, plan.fusion, plan.lexical, plan.filters, cache)
            assert pages[0] == pages[1]
            assert plan.mode is not Mode.FTS or pages[0].total, plan.lexical
    finally:
        checker.close()
        conn.close()


async def test_filtered_postings_are_read_by_term_not_probed_by_document(
    sqlite_corpus: tuple[Corpus, Path], embedder: DeterministicEmbedder
) -> None:
    """With filters, each term's postings are one key range, each posting checked against
    the eligible documents. Offered `doc_id IN (eligible)` as a key column, SQLite probed
    every eligible document under every term and project instead (42 ms against 3.3 ms for
    a kind filter over 10 projects at 100k chunks, the same rows)."""
    corpus, path = sqlite_corpus
    projects = await scored_projects(corpus, random.Random(3))
    conn, _ = connect(path, True, reader=True)
    index = VectorIndex(embedder.identity, True)
    checker = Fts5Checker()
    try:
        for mode in (Mode.FTS, Mode.HYBRID):
            for filters in (Filters(kinds=("note",)), Filters(directory_prefix="docs")):
                plan = await corpus.plan(projects, mode, "deploy freeze", filters=filters)
                sql, bindings = build(plan, index, checker)
                steps = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, bindings)]
                postings = [s for s in steps if s.startswith("SEARCH x USING PRIMARY KEY")]
                assert postings, steps
                assert not [s for s in postings if "doc_id=?" in s], postings
    finally:
        checker.close()
        conn.close()
