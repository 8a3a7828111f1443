"""FTS pages ranked from the SQLite store's in-process postings equal the SQL ranking.

The lexical cache (service.store.sqlite.lexical_cache) is asked by the search statement
itself, in the statement's snapshot, for an unfiltered FTS ranking whose membership is
counted. The promise checked here: whatever writes, rewrites, deletions and project
deletions happened, by this store or by another one on the same file, every FTS page
(documents, order, BM25 scores, normalised scores, exact total, relaxation flag) equals the
page the SQL path computes, bit for bit; the in-process ranking really serves them; and a
scope that does not fit is ranked in SQL.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from service.embeddings.deterministic import DeterministicEmbedder
from service.store.base import Filters, Fusion, Mode
from service.store.lexical_index import _compensated_add
from tests.integration.conftest import Corpus, Doc, fresh_backend
from tests.integration.lexical_cache_support import page_key, random_text

QUERIES = (
    "deploy", "deploy freeze", "star", "win window", "the deployment of windows",
    "2024 release", "frozen stardust orbit", "deploy OR freeze", "star -window",
    '"deploy freeze"', "nothingmatches", "starting win 2025 released orbit",
    "what is the orbit", "sta",
)


@pytest_asyncio.fixture
async def pair(
    request: pytest.FixtureRequest, tmp_path: Path, embedder: DeterministicEmbedder
) -> AsyncIterator[tuple[Corpus, Corpus]]:
    """Two stores on one SQLite file: one ranks FTS from its lexical cache."""
    async with fresh_backend("sqlite", request, tmp_path) as backend:
        fast = await backend.open(embedder.identity, lexical_cache_bytes=64 << 20)
        plain = await backend.open(embedder.identity, lexical_cache_bytes=0)
        try:
            yield Corpus(fast, embedder, "acme"), Corpus(plain, embedder, "acme")
        finally:
            await plain.close()
            await fast.close()


# HYBRID (SUM, the default, and RRF): the whole scope scanned exactly (every scored
# document's place is passed), or the vector cache's nearest chunks (the first rows, by score
# alone for SUM); MAX_MIN and filters are ranked in SQL on both.
SHAPES: tuple[tuple[Mode, dict[str, object]], ...] = (
    (Mode.FTS, {}),
    (Mode.FTS, {"filters": Filters(kinds=("note",))}),
    (Mode.HYBRID, {}),
    (Mode.HYBRID, {"exact_scan_limit": 5}),
    (Mode.HYBRID, {"fusion": Fusion.RRF}),
    (Mode.HYBRID, {"exact_scan_limit": 5, "fusion": Fusion.RRF}),
    (Mode.HYBRID, {"fusion": Fusion.MAX_MIN}),
    (Mode.VECTOR, {}),
)


async def _compare(fast: Corpus, plain: Corpus, scopes: list[list[int]]) -> None:
    for text in QUERIES:
        for scope in scopes:
            for mode, options in SHAPES:
                for limit, offset in ((10, 0), (3, 2), (100, 0)):
                    kw = {"limit": limit, "offset": offset, **options}
                    got = await fast.search(scope, mode, text, **kw)
                    want = await plain.search(scope, mode, text, **kw)
                    assert page_key(got) == page_key(want), (text, scope, mode, kw)


async def test_fast_pages_equal_sql_pages_through_random_writes(
    pair: tuple[Corpus, Corpus],
) -> None:
    fast, plain = pair
    rng = random.Random(18)
    projects = [(await fast.project(f"p{i}")).project_id for i in range(3)]
    for project in projects:
        plain.owners[project] = fast.tenant
    rows: dict[int, list[str]] = {p: [] for p in projects}
    for project in projects:
        docs = [
            Doc("issue" if i % 3 == 0 else "note", str(i), random_text(rng), title=random_text(rng))
            for i in range(40)
        ]
        rows[project] = [d.row_id for d in docs]
        await fast.write(project, docs)
    scopes = [projects, projects[:1], projects[1:]]
    await _compare(fast, plain, scopes)
    cache = fast.store._lexical_cache  # type: ignore[attr-defined]
    for round_ in range(6):
        writer = fast if round_ % 2 else plain  # the other store is another process
        project = rng.choice(projects)
        action = rng.choice(("rewrite", "add", "delete"))
        if action == "delete" and rows[project]:
            gone = rng.sample(rows[project], min(3, len(rows[project])))
            await writer.store.delete_documents(fast.tenant, project, [("note", r) for r in gone])
            rows[project] = [r for r in rows[project] if r not in gone]
        else:
            ids = (rng.sample(rows[project], min(5, len(rows[project]))) if action == "rewrite"
                   else [f"n{round_}-{i}" for i in range(5)])
            await writer.write(project, [Doc("note", r, random_text(rng)) for r in ids])
            rows[project] = sorted(set(rows[project]) | set(ids))
        await _compare(fast, plain, scopes)
    assert cache.stats().served > 1000, cache.stats()
    assert plain.store._lexical_cache.stats().served == 0  # type: ignore[attr-defined]
    await fast.store.delete_project(fast.tenant, projects[0])
    await _compare(fast, plain, [projects[1:], projects])


async def test_a_served_search_is_one_statement_and_sees_another_writer(
    pair: tuple[Corpus, Corpus],
) -> None:
    """The statement asks the cache in its own snapshot: a write by another store is seen by
    the next search (its project read again inside that statement), still one statement."""
    fast, plain = pair
    project = (await fast.project("p")).project_id
    plain.owners[project] = fast.tenant
    await fast.write(project, [Doc("note", str(i), f"deploy freeze {i}") for i in range(6)])
    plan = await fast.plan([project], Mode.FTS, "deploy")
    cache = fast.store._lexical_cache  # type: ignore[attr-defined]
    page, statements = await fast.counted(plan)
    assert len(statements) == 1
    assert "search_lexical_rank" in statements[0]
    assert "term_tf" not in statements[0]
    loads = cache.stats().loads

    await plain.write(project, [Doc("note", "9", "deploy deploy window")])
    page, statements = await fast.counted(plan)

    assert len(statements) == 1
    assert cache.stats().loads == loads + 1
    assert page_key(page) == page_key(await plain.search([project], Mode.FTS, "deploy"))
    assert page.hits[0].row_id == "9"
    assert page.total == 7


async def test_a_scope_that_does_not_fit_is_ranked_in_sql(
    tmp_path: Path, request: pytest.FixtureRequest, embedder: DeterministicEmbedder
) -> None:
    async with fresh_backend("sqlite", request, tmp_path) as backend:
        store = await backend.open(embedder.identity, lexical_cache_bytes=2_000)
        plain = await backend.open(embedder.identity, lexical_cache_bytes=0)
        try:
            small, other = Corpus(store, embedder, "acme"), Corpus(plain, embedder, "acme")
            project = (await small.project("p")).project_id
            other.owners[project] = small.tenant
            await small.write(
                project, [Doc("note", str(i), f"deploy freeze window {i}") for i in range(40)]
            )
            plan = await small.plan([project], Mode.FTS, "deploy window")
            page, statements = await small.counted(plan)
            assert len(statements) == 2
            assert "term_tf" in statements[1]
            want = await other.search([project], Mode.FTS, "deploy window")
            assert page_key(page) == page_key(want)
            assert store.stats().lexical_cache is not None
            assert store.stats().lexical_cache.fallbacks >= 1  # type: ignore[union-attr]
        finally:
            await plain.close()
            await store.close()


async def test_concurrent_searches_and_another_writer_never_serve_a_stale_ranking(
    pair: tuple[Corpus, Corpus],
) -> None:
    """FTS searches on the reader threads while another store rewrites, adds and deletes:
    every page is ordered and counted, none fails; once the writes stop, every page equals
    the SQL store's bit for bit."""
    fast, plain = pair
    rng = random.Random(32)
    projects = [(await fast.project(f"c{i}")).project_id for i in range(3)]
    for project in projects:
        plain.owners[project] = fast.tenant
        await fast.write(project, [Doc("note", str(i), random_text(rng)) for i in range(30)])
    texts = ["deploy freeze", "star", "win window", "starting win 2025 released orbit"]
    writing = True

    async def write() -> None:
        nonlocal writing
        try:
            for round_ in range(12):
                project = rng.choice(projects)
                ids = [str(rng.randrange(40)) for _ in range(4)]
                if round_ % 3 == 2:
                    await plain.store.delete_documents(
                        fast.tenant, project, [("note", r) for r in ids]
                    )
                else:
                    await plain.write(project, [Doc("note", r, random_text(rng)) for r in ids])
                await asyncio.sleep(0.01)
        finally:
            writing = False

    async def search(worker: int) -> int:
        pages = 0
        while writing:
            text = texts[(worker + pages) % len(texts)]
            page = await fast.search(projects, Mode.FTS, text, limit=7)
            order = [(-h.fts_score,) for h in page.hits]
            assert order == sorted(order) or page.relaxed, (text, order)
            assert page.total is not None
            assert page.total >= len(page.hits)
            pages += 1
        return pages

    searches = [asyncio.create_task(search(w)) for w in range(3)]
    try:
        await write()
    finally:
        pages = await asyncio.gather(*searches)
    assert sum(pages) > 10
    for text in texts:
        for limit, offset in ((10, 0), (3, 2)):
            got = await fast.search(projects, Mode.FTS, text, limit=limit, offset=offset)
            want = await plain.search(projects, Mode.FTS, text, limit=limit, offset=offset)
            assert page_key(got) == page_key(want), text


def test_compensated_sums_are_the_correctly_rounded_sums_whatever_the_order() -> None:
    """SQLite's SUM (Kahan-Babuska-Neumaier) of positive parts, as rank(sqlite=True) adds
    them: the correctly rounded sum (math.fsum) in every order tried, so the order SQLite
    groups a document's parts in does not matter."""
    rng = np.random.default_rng(7)
    docs, terms = 20_000, 24
    parts = rng.random((terms, docs)) * (10.0 ** rng.integers(-4, 2, size=(terms, docs)))
    parts[rng.random((terms, docs)) < 0.5] = 0.0
    at = np.arange(docs, dtype=np.int64)
    results = []
    for order in (np.arange(terms), np.arange(terms)[::-1], rng.permutation(terms)):
        sums, errors = np.zeros(docs), np.zeros(docs)
        for term in order:
            _compensated_add(sums, errors, at, parts[term])
        results.append(sums + errors)
    exact = np.array([math.fsum(parts[:, d]) for d in range(docs)])
    for result in results:
        assert np.array_equal(result, exact)
