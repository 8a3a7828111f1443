"""KNN candidates from the in-process matrices: current after any write, by anyone.

Each store's KNN path (more scope vectors than `exact_scan_limit`) takes its candidates from
its vector cache (service.store.sqlite.vector_cache, service.store.postgres.vector_cache).
The promise checked here, on both stores: whatever sequence of writes, re-embeddings,
deletions and project deletions happened, and whichever process (here: a second store on
the same database) made them, a KNN page is the page the exact scan gives over the same
rows (same documents, same scores), and never shows a vector that is not ready, not of the
identity, or not the chunk's current text. And the cache keeps to its budget, leaving
scopes it cannot hold to the store's index (vec0, HNSW).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import pytest_asyncio

from service.embeddings.deterministic import DeterministicEmbedder
from service.store.base import Mode, SearchPage
from service.store.bounded_scan import row_bytes as scan_row_bytes
from service.store.postgres import vector_cache as pg_vector_cache
from tests.integration.conftest import Backend, Corpus, Doc
from tests.support.pg import fresh_database

WORDS = ("galaxy", "redshift", "nebula", "comet", "orbit", "quasar", "pulsar", "dust", "ion")
VECTOR_MODES = ("ready", "ready", "ready", "pending", "other-model")
QUERIES = ("galaxy redshift", "comet orbit dust", "quasar")


CACHE_BYTES = 256 << 20


def row_bytes(backend: Backend) -> int:
    """What one 384-d vector costs the backend's cache (its floats, its int8 codes with their
    bounds, and its key)."""
    return scan_row_bytes(384) + (8 if backend.name == "sqlite" else 64)


@pytest_asyncio.fixture
async def two_stores(
    backend: Backend, embedder: DeterministicEmbedder
) -> AsyncIterator[tuple[Corpus, Corpus]]:
    """Two stores on one database: one with the cache, one without (index and exact scans)."""
    cached = await backend.open(embedder.identity, vector_cache_bytes=CACHE_BYTES)
    plain = await backend.open(embedder.identity, vector_cache_bytes=0)
    try:
        yield Corpus(cached, embedder, "acme"), Corpus(plain, embedder, "acme")
    finally:
        await plain.close()
        await cached.close()


def _text(rng: random.Random) -> str:
    paragraphs = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 6)))
        for _ in range(rng.randrange(1, 4))
    ]
    return "\n\n".join(paragraphs)


def _key(page: SearchPage) -> list[tuple[int, str, str, float, float]]:
    return [(h.project_id, h.kind, h.row_id, h.score, h.vector_score) for h in page.hits]


async def _filled_project(cached: Corpus, plain: Corpus, rng: random.Random) -> int:
    """A project of 200 notes of 2-6 random words, known to both stores' corpora."""
    project = (await cached.project("p")).project_id
    plain.owners[project] = cached.tenant
    fillers = [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(2, 7))) for _ in range(200)]
    await cached.write(project, [Doc("note", str(i), text) for i, text in enumerate(fillers)])
    return project


async def _compare(cached: Corpus, plain: Corpus, projects: list[int]) -> None:
    for text in QUERIES:
        for scope in (projects, projects[:1]):
            for mode in (Mode.VECTOR, Mode.HYBRID):
                knn = await cached.plan(scope, mode, text, limit=5, exact_scan_limit=0)
                exact = await plain.plan(scope, mode, text, limit=5, exact_scan_limit=10**9)
                got, want = await cached.store.search(knn), await plain.store.search(exact)
                vec0 = await plain.store.search(knn)
                assert got.ranking_is_exact == vec0.ranking_is_exact  # exact: no vectors at all
                if mode is Mode.VECTOR:
                    assert _key(got) == _key(want), (text, scope)
                    assert got.has_more == want.has_more, (text, scope)


async def test_knn_pages_follow_every_write_by_any_writer(
    two_stores: tuple[Corpus, Corpus],
) -> None:
    cached, plain = two_stores
    rng = random.Random(18)
    projects = [p.project_id for p in await cached.projects(3)]
    for project in projects:
        plain.owners[project] = cached.tenant
    for step in range(40):
        writer = rng.choice((cached, plain))  # the other store is another process's writes
        project = rng.choice(projects)
        action = rng.random()
        if action < 0.6:
            docs = [
                Doc(
                    rng.choice(("note", "issue")),
                    str(rng.randrange(10)),
                    _text(rng),
                    vectors=rng.choice(VECTOR_MODES),
                )
                for _ in range(rng.randrange(1, 5))
            ]
            await writer.write(project, {(d.kind, d.row_id): d for d in docs}.values())
        elif action < 0.9:
            keys = [(rng.choice(("note", "issue")), str(rng.randrange(10))) for _ in range(2)]
            await writer.store.delete_documents(cached.tenant, project, keys)
        else:
            await writer.store.delete_project(cached.tenant, project)
            projects.remove(project)
            fresh = (await cached.project(f"again-{step}")).project_id
            plain.owners[fresh] = cached.tenant
            projects.append(fresh)
        await _compare(cached, plain, projects)


async def test_hybrid_knn_keeps_the_vector_channel_current(
    two_stores: tuple[Corpus, Corpus],
) -> None:
    """A document re-embedded under new text is found by its new text, not its old one."""
    cached, plain = two_stores
    project = (await cached.project("p")).project_id
    plain.owners[project] = cached.tenant
    await cached.write(project, [Doc("note", str(i), f"comet orbit {i}") for i in range(30)])
    await cached.write(project, [Doc("note", "99", "galaxy redshift quasar")])
    plan = await cached.plan([project], Mode.VECTOR, "galaxy redshift quasar", exact_scan_limit=0)
    assert (await cached.store.search(plan)).hits[0].row_id == "99"
    await plain.write(project, [Doc("note", "99", "comet orbit dust")])  # the other writer
    page = await cached.store.search(plan)
    assert page.hits[0].row_id != "99" or page.hits[0].vector_score < 0.99
    exact = await plain.plan(
        [project], Mode.VECTOR, "galaxy redshift quasar", exact_scan_limit=10**9
    )
    assert _key(page) == _key(await plain.store.search(exact))


async def test_a_rewrite_that_keeps_every_length_moves_the_cache_on(
    two_stores: tuple[Corpus, Corpus],
) -> None:
    """The document farthest from the query, rewritten by the other store into the query's
    words with as many words (same counts and lengths for the project's statistics), is
    the nearest now: the cache, whose old matrix never proposed it, must see the change."""
    cached, plain = two_stores
    project = await _filled_project(cached, plain, random.Random(7))
    text = "galaxy redshift quasar"
    everything = await plain.plan([project], Mode.VECTOR, text, limit=300, exact_scan_limit=10**9)
    knn = await cached.plan([project], Mode.VECTOR, text, limit=5, exact_scan_limit=0)
    await cached.store.search(knn)  # the matrix is held from here on
    far = (await plain.store.search(everything)).hits[-1].row_id
    words = len(next(d for d in await _texts(plain, project) if d[0] == far)[1].split())
    rewritten = " ".join((text.split() * 3)[:words])
    await plain.write(project, [Doc("note", far, rewritten)])
    exact = await plain.plan([project], Mode.VECTOR, text, limit=5, exact_scan_limit=10**9)
    want = await plain.store.search(exact)
    assert want.hits[0].row_id == far
    assert _key(await cached.store.search(knn)) == _key(want)


async def _texts(corpus: Corpus, project: int) -> list[tuple[str, str]]:
    """(row_id, body) of the project's notes."""
    plan = await corpus.plan([project], Mode.FTS, "", limit=1000)
    return [(h.row_id, h.snippet) for h in (await corpus.store.search(plan)).hits]


async def test_vectors_changed_behind_the_store_are_seen(
    two_stores: tuple[Corpus, Corpus], backend: Backend
) -> None:
    """A tool updating `vectors` in place (re-embedding, un-readying) moves the cache on too:
    the chunk farthest from the query, given the nearest chunk's vector, is a candidate."""
    cached, plain = two_stores
    project = await _filled_project(cached, plain, random.Random(5))
    await cached.write(project, [Doc("note", "near", "galaxy redshift quasar")])
    text = "galaxy redshift quasar"
    knn = await cached.plan([project], Mode.VECTOR, text, limit=5, exact_scan_limit=0)
    exact = await plain.plan([project], Mode.VECTOR, text, limit=300, exact_scan_limit=10**9)
    assert (await cached.store.search(knn)).hits[0].row_id == "near"
    far = (await plain.store.search(exact)).hits[-1].row_id
    exact = await plain.plan([project], Mode.VECTOR, text, limit=5, exact_scan_limit=10**9)
    if backend.name == "sqlite":
        chunk_of = (
            "(SELECT v.chunk_id FROM vectors AS v JOIN chunks AS c ON c.id = v.chunk_id"
            " JOIN documents AS d ON d.id = c.document_id WHERE d.row_id = ?)"
        )
        copy = ("UPDATE vectors SET embedding = (SELECT embedding FROM vectors"  # noqa: S608
                " WHERE chunk_id = " + chunk_of + ") WHERE chunk_id = " + chunk_of)
        unready = ("UPDATE vectors SET state = 'pending', embedding = NULL"  # noqa: S608
                   " WHERE chunk_id = " + chunk_of)
    else:  # every document here is one chunk
        copy = ("UPDATE vectors SET embedding = (SELECT embedding FROM vectors"
                " WHERE row_id = ?) WHERE row_id = ?")
        unready = "UPDATE vectors SET state = 'pending', embedding = NULL WHERE row_id = ?"
    await backend.execute(copy, "near", far)
    page = await cached.store.search(knn)
    assert far in {h.row_id for h in page.hits[:2]}
    assert _key(page) == _key(await plain.store.search(exact))
    await backend.execute(unready, "near")
    page = await cached.store.search(knn)
    assert "near" not in {h.row_id for h in page.hits}
    assert _key(page) == _key(await plain.store.search(exact))


async def test_deleting_the_nearest_documents_leaves_no_hole(
    two_stores: tuple[Corpus, Corpus],
) -> None:
    """The deleted candidates are not in the cache any more: the page is filled from the rest."""
    cached, plain = two_stores
    project = await _filled_project(cached, plain, random.Random(6))
    text = "galaxy redshift quasar"
    knn = await cached.plan([project], Mode.VECTOR, text, limit=5, exact_scan_limit=0)
    exact = await plain.plan([project], Mode.VECTOR, text, limit=80, exact_scan_limit=10**9)
    assert len((await cached.store.search(knn)).hits) == 5
    nearest = [("note", h.row_id) for h in (await plain.store.search(exact)).hits]
    await plain.store.delete_documents(cached.tenant, project, nearest)
    exact = await plain.plan([project], Mode.VECTOR, text, limit=5, exact_scan_limit=10**9)
    page = await cached.store.search(knn)
    assert len(page.hits) == 5
    assert _key(page) == _key(await plain.store.search(exact))


async def test_equal_vectors_fill_every_page_in_identity_order(
    two_stores: tuple[Corpus, Corpus],
) -> None:
    """Documents with equal texts have equal vectors. The cache gives a page exactly k
    candidates, cutting equal distances in the order the statement breaks ties by (project,
    kind, row id, chunk; row ids compare as strings, "10" before "9"), although the chunks
    were written in another order: every page of every size is the exact scan's."""
    cached, plain = two_stores
    rng = random.Random(38)
    projects = [p.project_id for p in await cached.projects(2)]
    text = "comet orbit dust"
    for project in projects:
        plain.owners[project] = cached.tenant
        docs = [
            Doc(kind, str(n), rng.choice((text, f"{text}\n\n{text}", "quasar pulsar", text)))
            for kind in ("note", "issue")
            for n in range(45)
        ]
        rng.shuffle(docs)
        for start in range(0, len(docs), 30):
            await rng.choice((cached, plain)).write(project, docs[start : start + 30])
    for scope in (projects, projects[:1]):
        exact = await plain.plan(scope, Mode.VECTOR, text, limit=70, exact_scan_limit=10**9)
        want = _key(await plain.store.search(exact))
        for size in (1, 6, 25):
            got: list[tuple[int, str, str, float, float]] = []
            for offset in range(0, 70, size):
                knn = await cached.plan(
                    scope, Mode.VECTOR, text, limit=size, offset=offset, exact_scan_limit=0
                )
                page = await cached.store.search(knn)
                assert not page.ranking_is_exact
                got += _key(page)
            assert got[:70] == want, (scope, size)


async def _comet_projects(corpus: Corpus, reference: Corpus, counts: list[int]) -> list[int]:
    """One project per count, each of that many one-chunk "comet" notes, known to both."""
    projects = [p.project_id for p in await corpus.projects(len(counts))]
    for project, count in zip(projects, counts, strict=True):
        reference.owners[project] = corpus.tenant
        await corpus.write(project, [Doc("note", str(i), f"comet {i} orbit") for i in range(count)])
    return projects


async def _agrees_with_the_index(corpus: Corpus, reference: Corpus, scope: list[int]) -> None:
    """The cached store's KNN page over `scope` is the one its index gives (the reference
    store has no cache)."""
    knn = await corpus.plan(scope, Mode.VECTOR, "comet orbit", limit=5, exact_scan_limit=0)
    index = await reference.plan(scope, Mode.VECTOR, "comet orbit", limit=5, exact_scan_limit=0)
    assert _key(await corpus.store.search(knn)) == _key(await reference.store.search(index))


async def test_scopes_past_the_budget_are_left_to_the_index(
    backend: Backend, embedder: DeterministicEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_vector_cache, "COLD_SECONDS", 0.0)  # PostgreSQL: evict at once
    # Room for one project's vectors (12 chunks of 384 float32 and their keys), not two.
    budget = 12 * row_bytes(backend) + 100
    store = await backend.open(embedder.identity, vector_cache_bytes=budget)
    plain = await backend.open(embedder.identity, vector_cache_bytes=0)
    try:
        corpus, reference = Corpus(store, embedder, "acme"), Corpus(plain, embedder, "acme")
        projects = await _comet_projects(corpus, reference, [12, 12])
        loads = []
        for scope in (projects[:1], projects, projects[1:]):
            await _agrees_with_the_index(corpus, reference, scope)
            held = store.stats().vector_cache
            assert held is not None
            assert held.bytes <= budget
            assert held.projects <= 1
            loads.append(held.loads)
        # The scope of two was counted, not read: one read for each one-project scope.
        assert loads == [1, 1, 2]
        fallbacks = store.stats().vector_cache
        assert fallbacks is not None
        assert fallbacks.fallbacks == 1
    finally:
        await plain.close()
        await store.close()


async def test_concurrent_searches_share_a_cache_that_keeps_evicting(
    backend: Backend, embedder: DeterministicEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many searches at once (SQLite: on the reader threads), over scopes that do not all
    fit: each page is still the exact one (loads and evictions race, nothing is lost or
    mixed up)."""
    monkeypatch.setattr(pg_vector_cache, "COLD_SECONDS", 0.0)  # PostgreSQL: evict at once
    per_project = 40 * row_bytes(backend)
    store = await backend.open(embedder.identity, vector_cache_bytes=3 * per_project)
    plain = await backend.open(embedder.identity, vector_cache_bytes=0)
    try:
        corpus, reference = Corpus(store, embedder, "acme"), Corpus(plain, embedder, "acme")
        rng = random.Random(9)
        projects = [p.project_id for p in await corpus.projects(5)]
        for project in projects:
            reference.owners[project] = corpus.tenant
            texts = [" ".join(rng.choice(WORDS) for _ in range(4)) for _ in range(40)]
            await corpus.write(project, [Doc("note", str(i), t) for i, t in enumerate(texts)])
        cases = []
        for _ in range(40):
            scope = rng.sample(projects, rng.randrange(1, 3))
            text = " ".join(rng.sample(WORDS, 3))
            knn = await corpus.plan(scope, Mode.VECTOR, text, limit=5, exact_scan_limit=0)
            exact = await reference.plan(scope, Mode.VECTOR, text, limit=5, exact_scan_limit=10**9)
            cases.append((knn, _key(await plain.search(exact))))
        pages = await asyncio.gather(*(store.search(knn) for knn, _ in cases))
        assert [_key(page) for page in pages] == [want for _, want in cases]
        held = store.stats().vector_cache
        assert held is not None
        assert held.bytes <= 3 * per_project
    finally:
        await plain.close()
        await store.close()


async def test_searches_racing_writes_never_fail_and_end_current(
    two_stores: tuple[Corpus, Corpus],
) -> None:
    """KNN searches while both stores write to the same projects: every search answers
    (its snapshot is a committed state), and once the writes are done pages are exact."""
    cached, plain = two_stores
    rng = random.Random(11)
    projects = [p.project_id for p in await cached.projects(3)]
    for project in projects:
        plain.owners[project] = cached.tenant

    async def write(step: int) -> None:
        writer = (cached, plain)[step % 2]
        docs = [Doc("note", str(rng.randrange(30)), _text(rng)) for _ in range(3)]
        await writer.write(rng.choice(projects), {d.row_id: d for d in docs}.values())

    async def search() -> SearchPage:
        text = " ".join(rng.sample(WORDS, 2))
        plan = await cached.plan(projects, Mode.VECTOR, text, limit=5, exact_scan_limit=0)
        return await cached.store.search(plan)

    jobs = [write(i) for i in range(20)] + [search() for _ in range(40)]
    rng.shuffle(jobs)
    results = await asyncio.gather(*jobs)
    assert all(r is None or isinstance(r, SearchPage) for r in results)
    await _compare(cached, plain, projects)


@pytest.mark.parametrize("fits", [True, False])
async def test_a_restarted_store_reads_its_matrices_at_once_when_they_fit(
    backend: Backend, embedder: DeterministicEmbedder, fits: bool
) -> None:
    first = await backend.open(embedder.identity, vector_cache_bytes=0)
    corpus = Corpus(first, embedder, "acme")
    projects = [p.project_id for p in await corpus.projects(3)]
    for project in projects:
        await corpus.write(project, [Doc("note", str(i), f"comet {i} orbit") for i in range(12)])
    await first.close()
    budget = 36 * row_bytes(backend) if fits else 36 * row_bytes(backend) - 1
    store = await backend.open(embedder.identity, vector_cache_bytes=budget)
    try:
        await store.warmed()  # type: ignore[attr-defined]
        stats = store.stats().vector_cache
        assert stats is not None
        assert (stats.projects, stats.loads) == ((3, 3) if fits else (0, 0))
        corpus = Corpus(store, embedder, "acme")
        plan = await corpus.plan(projects[:1], Mode.VECTOR, "comet orbit", exact_scan_limit=0)
        assert (await store.search(plan)).hits
        after = store.stats().vector_cache
        assert after is not None
        assert after.loads == (3 if fits else 1)  # warm: the search read nothing more
    finally:
        await store.close()


@pytest.mark.postgres
async def test_a_project_too_large_to_read_at_once_is_left_to_hnsw(
    pg_dsn: str, embedder: DeterministicEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL reads a project's matrix as one bytea (capped at 1 GB by PostgreSQL): a
    project past MAX_PROJECT_BYTES is never read, and HNSW answers its scopes."""
    from service.store.postgres import PostgresStore, vector_cache

    monkeypatch.setattr(vector_cache, "MAX_PROJECT_BYTES", 11 * 384 * 4)
    async with fresh_database(pg_dsn) as dsn:
        store = PostgresStore(dsn, embedder.identity, vector_cache_bytes=CACHE_BYTES)
        plain = PostgresStore(dsn, embedder.identity, vector_cache_bytes=0)
        await store.open()
        await plain.open()
        try:
            corpus, reference = Corpus(store, embedder, "acme"), Corpus(plain, embedder, "acme")
            small, large = await _comet_projects(corpus, reference, [11, 12])
            for scope, loads, fallbacks in (([small], 1, 0), ([small, large], 1, 1)):
                await _agrees_with_the_index(corpus, reference, scope)
                held = store.stats().vector_cache
                assert held is not None
                assert (held.loads, held.fallbacks) == (loads, fallbacks)
        finally:
            await plain.close()
            await store.close()


@pytest.mark.postgres
async def test_a_working_set_past_the_budget_does_not_evict_what_is_in_use(
    pg_dsn: str, embedder: DeterministicEmbedder
) -> None:
    """PostgreSQL: room for one project, two scopes taking turns. The second scope does not
    evict the first one's matrix, used moments ago (COLD_SECONDS): HNSW answers it, and
    nothing is read again at every search."""
    from service.store.postgres import PostgresStore

    async with fresh_database(pg_dsn) as dsn:
        budget = 12 * (scan_row_bytes(384) + 64)
        store = PostgresStore(dsn, embedder.identity, vector_cache_bytes=budget)
        plain = PostgresStore(dsn, embedder.identity, vector_cache_bytes=0)
        await store.open()
        await plain.open()
        try:
            corpus, reference = Corpus(store, embedder, "acme"), Corpus(plain, embedder, "acme")
            projects = await _comet_projects(corpus, reference, [12, 12])
            for _ in range(3):
                for scope in ([projects[0]], [projects[1]]):
                    await _agrees_with_the_index(corpus, reference, scope)
            held = store.stats().vector_cache
            assert held is not None
            assert (held.loads, held.evictions, held.fallbacks) == (1, 0, 3)
        finally:
            await plain.close()
            await store.close()


async def _loads(store: object) -> int:
    stats = store.stats().vector_cache  # type: ignore[attr-defined]
    assert stats is not None
    return int(stats.loads)


async def _settled(store: object, quiet: float, seconds: float = 20.0) -> int:
    """The cache's loads once they stopped moving for a few quiet periods (the background
    refreshes ran)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    loads, since = await _loads(store), loop.time()
    while loop.time() - since < 3 * quiet:
        assert loop.time() < deadline, "the loads never settled"
        await asyncio.sleep(0.05)
        now = await _loads(store)
        if now != loads:
            loads, since = now, loop.time()
    return loads


@asynccontextmanager
async def _refreshing(
    backend: Backend, embedder: DeterministicEmbedder, quiet: float
) -> AsyncIterator[tuple[Corpus, Corpus]]:
    """A store whose cache refreshes after `quiet` seconds without writes, and a reference
    store without a cache on the same database."""
    async with (
        backend.opened(embedder.identity, vector_cache_bytes=CACHE_BYTES,
                       vector_cache_refresh=quiet) as store,
        backend.opened(embedder.identity, vector_cache_bytes=0) as plain,
    ):
        # The start-up warm-up reads in the background too: let it finish first, or on a busy
        # machine it reads a project after the test's first writes and counts as a load.
        await store.warmed()  # type: ignore[attr-defined]
        yield Corpus(store, embedder, "acme"), Corpus(plain, embedder, "acme")


async def test_own_writes_are_read_again_before_the_next_search_needs_them(
    backend: Backend, embedder: DeterministicEmbedder
) -> None:
    """After a burst of writes and a quiet period, the projects they moved are read again in
    the background: the next KNN search reads nothing and its page is the exact scan's."""
    async with _refreshing(backend, embedder, 0.3) as (cached, reference):
        store = cached.store
        projects = [p.project_id for p in await cached.projects(2)]
        for project in projects:
            reference.owners[project] = cached.tenant
        rng = random.Random(29)
        for project in projects:  # a burst: each write moves its project's generation
            for batch in range(3):
                await cached.write(project, [
                    Doc("note", f"{batch}-{i}", _text(rng)) for i in range(8)
                ])
        loads = await _settled(store, 0.3)
        assert loads >= len(projects)
        await _compare(cached, reference, projects)
        assert await _loads(store) == loads  # the searches found every matrix current
        # A later write to one project: only that one is read again, before any search.
        await cached.write(projects[0], [Doc("note", "late", "comet orbit quasar dust")])
        assert await _settled(store, 0.3) == loads + 1
        await _compare(cached, reference, projects)
        assert await _loads(store) == loads + 1


async def test_writes_that_never_pause_leave_the_reads_to_the_searches(
    backend: Backend, embedder: DeterministicEmbedder
) -> None:
    """The refresh waits for a quiet period: while writes keep coming nothing is read in the
    background, and the searches stay current (each reads what moved). The quiet period is
    30 s (the test never waits for it), and `_refreshing` waits for the start-up warm-up:
    on a busy machine it read the project after the first writes (2 of 15 runs)."""
    async with _refreshing(backend, embedder, 30.0) as (cached, reference):
        store = cached.store
        project = (await cached.project("busy")).project_id
        reference.owners[project] = cached.tenant
        rng = random.Random(30)
        for step in range(8):
            await cached.write(project, [Doc("note", str(step), _text(rng))])
            await asyncio.sleep(0.05)
        assert await _loads(store) == 0
        await _compare(cached, reference, [project])
        assert await _loads(store) >= 1  # the search read it
