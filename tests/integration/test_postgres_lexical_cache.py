"""FTS pages ranked from the PostgreSQL store's in-process postings equal the SQL ranking.

The lexical cache (service.store.postgres.lexical_cache) ranks an unfiltered FTS search in
process and the statement uses that ranking only when everything it came from is what the
statement's own snapshot holds. The promise checked here: whatever writes, rewrites,
deletions and project deletions happened, by this store or by another one on the same
database, every FTS page (documents, order, BM25 scores, normalised scores, exact total,
relaxation flag) equals the page the SQL path computes, bit for bit; and the in-process
ranking really serves most of them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from service.embeddings.deterministic import DeterministicEmbedder
from service.projects.lexical import compile_query
from service.store.base import Filters, Fusion, Mode
from service.store.postgres.lexical_cache import PgLexicalCache, predict_shape
from tests.integration.conftest import Corpus, Doc, fresh_backend
from tests.integration.lexical_cache_support import cached_and_plain, page_key, random_text

pytestmark = pytest.mark.postgres

QUERIES = (
    "deploy", "deploy freeze", "star", "win window", "the deployment of windows",
    "2024 release", "frozen stardust orbit", "deploy OR freeze", "star -window",
    '"deploy freeze"', "nothingmatches", "starting win 2025 released orbit",
    "organization", "what is the orbit",
)


@pytest_asyncio.fixture
async def pair(
    request: pytest.FixtureRequest, tmp_path: object, embedder: DeterministicEmbedder
) -> AsyncIterator[tuple[Corpus, Corpus]]:
    """Two stores on one fresh PostgreSQL database: one ranks from its lexical cache."""
    async with (
        fresh_backend("postgres", request, tmp_path) as backend,  # type: ignore[arg-type]
        cached_and_plain(backend, embedder) as corpora,
    ):
        yield corpora


# HYBRID (SUM, the default, and RRF): the whole scope scanned exactly (the whole lexical list
# is passed), or the vector cache's nearest chunks (the first rows, by score alone for SUM,
# and the candidates' places are passed).
SHAPES: tuple[tuple[Mode, dict[str, object]], ...] = (
    (Mode.FTS, {}),
    # A kind filter: N, avgdl and df over the eligible documents, ranked in process too.
    (Mode.FTS, {"filters": Filters(kinds=("note",))}),
    (Mode.FTS, {"filters": Filters(kinds=("issue", "note"))}),
    (Mode.HYBRID, {"exact_scan_limit": 50_000}),
    (Mode.HYBRID, {"exact_scan_limit": 5}),
    (Mode.HYBRID, {"exact_scan_limit": 50_000, "fusion": Fusion.RRF}),
    (Mode.HYBRID, {"exact_scan_limit": 5, "fusion": Fusion.RRF}),
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


def test_plain_words_are_predicted_and_operators_are_left_to_sql() -> None:
    shape = predict_shape(compile_query("the deployment of windows"))
    assert shape is not None
    assert [(t.lexeme, t.prefix) for t in shape.terms] == [("deploy", True), ("window", True)]
    assert (shape.strict_at, shape.any_term) == (2, True)
    one = predict_shape(compile_query("star"))
    assert one is not None
    assert (one.strict_at, one.any_term) == (1, False)
    for text in ("deploy OR freeze", "star -window", '"deploy freeze"', "el/1 thing"):
        shape = predict_shape(compile_query(text))
        assert shape is None or text == "deploy OR freeze", text


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
    cache = fast.store._lexical_cache  # type: ignore[attr-defined]
    assert cache.served > 1500, cache.served
    # PostgreSQL 18 stems "organization" to 'organ', PyStemmer to 'organiz': the first
    # search taught the cache, so this one is ranked in process.
    assert cache.learned.get("organization") == "organ"
    served = cache.served
    await fast.search(projects, Mode.FTS, "organization")
    assert cache.served == served + 1
    await fast.store.delete_project(fast.tenant, projects[0])
    await _compare(fast, plain, [projects[1:]])


async def test_a_postings_read_gives_up_on_a_locked_table(pair: tuple[Corpus, Corpus]) -> None:
    """A read (the background refresh's, or a search's first) never queues behind a lock
    holding a pooled connection: it fails at once and the search ranks in SQL."""
    fast, _ = pair
    project = (await fast.project("locked")).project_id
    await fast.write(project, [Doc("note", "1", "deploy freeze")])
    dsn = fast.store.dsn  # type: ignore[attr-defined]
    locker, reader = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        async with locker.transaction():
            await locker.execute("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            with pytest.raises(asyncpg.LockNotAvailableError):
                await PgLexicalCache(64 << 20).warm(reader)
            assert time.monotonic() - started < 2.0
        page = await fast.search([project], Mode.FTS, "deploy")  # the lock is gone
        assert [h.row_id for h in page.hits] == ["1"]
    finally:
        await locker.close()
        await reader.close()


async def test_a_refused_ranking_is_ranked_in_sql_by_a_second_statement(
    pair: tuple[Corpus, Corpus],
) -> None:
    """The FTS statement of an in-process ranking holds no SQL ranking: when it refuses the
    ranking (another store wrote since the postings were read), the SQL-ranked statement
    follows, and the postings are read again for the next search, which is one statement."""
    fast, plain = pair
    project = (await fast.project("p")).project_id
    plain.owners[project] = fast.tenant
    await fast.write(project, [Doc("note", str(i), f"deploy freeze {i}") for i in range(6)])
    plan = await fast.plan([project], Mode.FTS, "deploy")
    await fast.store.search(plan)  # the postings are read
    page, statements = await fast.counted(plan)
    assert len(statements) == 1
    cache = fast.store._lexical_cache  # type: ignore[attr-defined]
    served = cache.served

    await plain.write(project, [Doc("note", "9", "deploy deploy window")])
    page, statements = await fast.counted(plan)

    assert len(statements) == 2, statements
    assert "lex_fast" in statements[0]
    assert "term_tf" not in statements[0]
    assert "term_tf" in statements[1]
    assert cache.served == served
    assert page_key(page) == page_key(await plain.search([project], Mode.FTS, "deploy"))
    assert page.hits[0].row_id == "9"
    assert page.total == 7
    page, statements = await fast.counted(plan)
    assert cache.served == served + 1
    assert [s for s in statements if "lex_fast" in s] == statements[-1:]
    assert page_key(page) == page_key(await plain.search([project], Mode.FTS, "deploy"))


async def test_concurrent_searches_and_another_writer_never_serve_a_stale_ranking(
    pair: tuple[Corpus, Corpus],
) -> None:
    """FTS searches run concurrently while another store (another process, as far as this
    store's cache knows) rewrites, adds and deletes documents: rankings read before a write
    are refused by statements that see it, and ranked again in SQL. Every page is ordered by
    tier, then score; none fails; and once the writes stop, every page equals the SQL store's
    bit for bit."""
    fast, plain = pair
    rng = random.Random(32)
    projects = [(await fast.project(f"c{i}")).project_id for i in range(3)]
    for project in projects:
        plain.owners[project] = fast.tenant
        await fast.write(project, [Doc("note", str(i), random_text(rng)) for i in range(30)])
    texts = [q for q in QUERIES if predict_shape(compile_query(q)) is not None]
    cache = fast.store._lexical_cache  # type: ignore[attr-defined]
    for text in texts:
        await fast.search(projects, Mode.FTS, text)  # the postings are held
    before, served = cache.stats().fallbacks, cache.served
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

    searches = [asyncio.create_task(search(w)) for w in range(4)]
    try:
        await write()
    finally:
        pages = await asyncio.gather(*searches)
    assert sum(pages) > 20
    assert cache.stats().fallbacks > before  # some rankings were refused and ranked in SQL
    assert cache.served > served  # and others were used, between the writes
    for text in texts:
        for limit, offset in ((10, 0), (3, 2)):
            got = await fast.search(projects, Mode.FTS, text, limit=limit, offset=offset)
            want = await plain.search(projects, Mode.FTS, text, limit=limit, offset=offset)
            assert page_key(got) == page_key(want), text


async def test_a_kind_filter_is_ranked_in_process_over_the_eligible_documents(
    pair: tuple[Corpus, Corpus],
) -> None:
    """With a kind filter, N, avgdl and each term's df are those of the documents of those
    kinds (ELIGIBLE_STATS): the ranking in process counts the same, so the statement uses
    it, one statement, and the page equals the SQL store's."""
    fast, plain = pair
    project = (await fast.project("k")).project_id
    plain.owners[project] = fast.tenant
    await fast.write(project, [
        Doc("issue" if i % 2 else "note", str(i), f"deploy freeze window {i} " * (1 + i % 4))
        for i in range(12)
    ])
    filters = Filters(kinds=("note",))
    plan = await fast.plan([project], Mode.FTS, "deploy window", filters=filters)
    await fast.store.search(plan)  # the postings are read
    cache = fast.store._lexical_cache  # type: ignore[attr-defined]
    served = cache.served

    page, statements = await fast.counted(plan)

    assert cache.served == served + 1
    assert len(statements) == 1
    assert "lex_fast" in statements[0]
    assert {h.kind for h in page.hits} == {"note"}
    assert page.total == 6
    want = await plain.search([project], Mode.FTS, "deploy window", filters=filters)
    assert page_key(page) == page_key(want)
