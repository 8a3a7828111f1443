"""Congruence: one corpus in SQLite and in PostgreSQL ranks the same way in every mode.

Both stores compute the same BM25 (Lucene's, over the scope); their document lengths are
counted a little differently (SQLite counts stopwords too), so the corpus keeps lexical
order unambiguous: every document has the same number of tokens and query terms differ only
in how often they occur. Vector order must match exactly, and so must RRF scores (the same
ranks give the same sums).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from service.embeddings.deterministic import DeterministicEmbedder
from service.store.base import Fusion, Mode, SearchPage
from tests.integration.conftest import HAVE_PG_SUPPORT, Corpus, Doc, fresh_backend, keys

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not HAVE_PG_SUPPORT, reason="tests/support/pg.py is missing"),
]

# Distinct filler words per document: no two documents are mirror images of each other,
# so no two cosine similarities tie by symmetry (float rounding would order them at random).
_TREES = (
    "alder birch cedar dogwood elm fir ginkgo hazel juniper larch maple oak pine rowan spruce "
    "sumac tamarack walnut willow yew acacia baobab cypress ebony hemlock laurel linden magnolia "
    "mahogany olive poplar sequoia teak tupelo aspen banyan catalpa hawthorn holly locust "
    "mulberry sassafras sycamore boxwood buckeye chestnut cottonwood redwood sweetgum"
)
FILLER = _TREES.split()
BODY_TOKENS = 8
# (comet count, orbit count, galaxy count) per document; the rest of the body is filler.
# Each term occurs in 8 of 12 documents, so every BM25 variant gives them the same IDF;
# no document mirrors another with comet and orbit swapped (that would tie by symmetry).
MIX = [
    (4, 0, 1),
    (3, 3, 0),
    (2, 2, 2),
    (1, 1, 0),
    (0, 3, 1),
    (0, 0, 3),
    (1, 0, 4),
    (2, 0, 0),
    (0, 1, 0),
    (3, 1, 2),
    (0, 2, 1),
    (1, 3, 3),
]
# How often each body repeats its first filler word: chosen (by a search over the
# deterministic embedder) so that no two cosine similarities are within 3% of each other.
REPEATS = [1, 3, 1, 3, 4, 1, 4, 3, 4, 3, 4, 1]
QUERIES = [
    (Mode.FTS, "comet", Fusion.RRF),
    (Mode.FTS, "comet orbit", Fusion.RRF),
    (Mode.FTS, "galaxy xylophone zeppelin", Fusion.RRF),  # relaxed: one of the terms occurs
    (Mode.VECTOR, "comet orbit", Fusion.RRF),
    (Mode.VECTOR, "galaxy", Fusion.RRF),
    (Mode.VECTOR, "orbit galaxy comet lorem", Fusion.RRF),
    (Mode.HYBRID, "comet", Fusion.MAX_MIN),
    (Mode.HYBRID, "orbit", Fusion.MAX_MIN),
    (Mode.HYBRID, "comet", Fusion.RRF),
    (Mode.HYBRID, "comet orbit", Fusion.RRF),
    (Mode.HYBRID, "comet", Fusion.SUM),
    (Mode.HYBRID, "comet orbit", Fusion.SUM),
]


def _docs() -> list[Doc]:
    """The same documents for every project: equal scores, ties broken by identity."""
    docs = []
    fillers = iter(FILLER)
    for i, (comet, orbit, galaxy) in enumerate(MIX):
        words = ["comet"] * comet + ["orbit"] * orbit + ["galaxy"] * galaxy
        repeated = next(fillers)
        words += [repeated] * min(REPEATS[i], BODY_TOKENS - len(words))
        words += [next(fillers) for _ in range(BODY_TOKENS - len(words))]
        docs.append(
            Doc(
                ("note", "observation")[i % 2],
                f"r{i:02d}",
                " ".join(words),
                title=f"entry{i:02d}",
                path="log/entry.md",
            )
        )
    return docs


@pytest_asyncio.fixture(scope="module")
async def pair(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    embedder: DeterministicEmbedder,
) -> AsyncIterator[tuple[Corpus, Corpus]]:
    """The same corpus in a fresh SQLite file and a fresh PostgreSQL database."""
    directory = tmp_path_factory.mktemp("congruence")
    async with (
        fresh_backend("sqlite", request, directory) as lite,
        fresh_backend("postgres", request, directory) as pg,
        lite.opened(embedder.identity) as s1,
        pg.opened(embedder.identity) as s2,
    ):
        corpora = (Corpus(s1, embedder, "acme"), Corpus(s2, embedder, "acme"))
        for corpus in corpora:
            for project in await corpus.projects(2):
                await corpus.write(project.project_id, _docs())
        yield corpora


def _gaps_are_clear(page: SearchPage, relative: float, mode: Mode, fusion: Fusion) -> bool:
    """Neighbours differ clearly, unless they are the same document in two projects.

    FTS may tie exactly: equal term and token counts give equal BM25 on either backend.
    RRF scores are sums of 1 / (k + rank): equal ranks give bitwise equal sums anywhere.
    """
    if mode is Mode.HYBRID and fusion is Fusion.RRF:
        return True
    pairs = zip(page.hits, page.hits[1:], strict=False)
    return all(
        (a.kind, a.row_id) == (b.kind, b.row_id)
        or a.score - b.score > relative * abs(a.score)
        or (mode is Mode.FTS and a.score == b.score)
        for a, b in pairs
    )


@pytest.mark.parametrize(
    ("mode", "text", "fusion"), QUERIES, ids=[f"{m}-{t}-{f}" for m, t, f in QUERIES]
)
async def test_same_ranking_on_both_backends(
    pair: tuple[Corpus, Corpus], mode: Mode, text: str, fusion: Fusion
) -> None:
    pages = []
    for corpus in pair:
        scope = [p.project_id for p in await corpus.store.list_projects("acme", 0, 10)]
        # A floor keeps near-zero similarities (sign decided by rounding) out of the set.
        pages.append(
            await corpus.search(scope, mode, text, limit=50, min_similarity=0.05, fusion=fusion)
        )
    sqlite_page, pg_page = pages
    assert sqlite_page.hits, "the query must match something"
    assert _gaps_are_clear(sqlite_page, 1e-3, mode, fusion), "corpus has near-ties"
    assert keys(sqlite_page.hits) == keys(pg_page.hits)
    assert sqlite_page.total == pg_page.total
    assert sqlite_page.relaxed == pg_page.relaxed
    if mode is Mode.VECTOR or fusion is Fusion.RRF:
        for a, b in zip(sqlite_page.hits, pg_page.hits, strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-5)
    if mode is not Mode.VECTOR:
        for a, b in zip(sqlite_page.hits, pg_page.hits, strict=True):
            assert a.fts_normalized == pytest.approx(b.fts_normalized, abs=0.05)
