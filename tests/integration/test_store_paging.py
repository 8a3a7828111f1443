"""Ranking before pagination: page-size independence, exact FTS totals, semantic probes."""

from __future__ import annotations

import pytest

from service.store.base import Mode, SearchHit
from tests.integration.conftest import SEMANTIC, Corpus, Doc, keys

WORDS = ("orbit", "comet", "nebula", "quasar", "pulsar", "meteor")


async def _load(corpus: Corpus, per_project: int = 10) -> list[int]:
    projects = await corpus.projects(3)
    for n, project in enumerate(projects):
        docs = []
        for i in range(per_project):
            # Varying term frequencies and lengths give a spread of BM25 and cosine scores.
            words = " ".join(WORDS[(i + j + n) % len(WORDS)] for j in range(1 + i % 4))
            body = f"star map {i} {words} nebula " + "filler " * (i % 5)
            docs.append(Doc(("note", "observation")[i % 2], str(i), body))
        await corpus.write(project.project_id, docs)
    return [p.project_id for p in projects]


def _scored(hits: tuple[SearchHit, ...]) -> list[tuple[int, str, str, float]]:
    return [(h.project_id, h.kind, h.row_id, round(h.score, 9)) for h in hits]


@pytest.mark.parametrize("mode", list(Mode))
async def test_top_20_is_the_same_for_any_page_size(corpus: Corpus, mode: Mode) -> None:
    scope = await _load(corpus)
    whole = await corpus.search(scope, mode, "nebula star", limit=20)
    assert len(whole.hits) == 20

    for size in (10, 5):
        pages = [
            await corpus.search(scope, mode, "nebula star", limit=size, offset=offset)
            for offset in range(0, 20, size)
        ]
        assert _scored(tuple(h for p in pages for h in p.hits)) == _scored(whole.hits)
        assert all(p.has_more for p in pages)
        assert {p.relaxed for p in pages} == {whole.relaxed}
    scores = [h.score for h in whole.hits]
    assert scores == sorted(scores, reverse=True)

    beyond = await corpus.search(scope, mode, "nebula star", limit=10, offset=100)
    assert beyond.hits == ()
    assert beyond.has_more is False


async def test_fts_total_is_exact_on_every_page(corpus: Corpus) -> None:
    scope = await _load(corpus)
    first = await corpus.search(scope, Mode.FTS, "nebula", limit=7)
    assert first.total == 30
    assert first.has_more is True
    last = await corpus.search(scope, Mode.FTS, "nebula", limit=7, offset=28)
    assert (len(last.hits), last.total, last.has_more) == (2, 30, False)
    beyond = await corpus.search(scope, Mode.FTS, "nebula", limit=7, offset=35)
    assert (beyond.hits, beyond.total, beyond.has_more) == ((), 30, False)
    listing = await corpus.search(scope, Mode.FTS, "", limit=4)
    assert (listing.total, len(listing.hits)) == (30, 4)
    assert keys(listing.hits) == sorted(keys(listing.hits))


@pytest.mark.parametrize("mode", SEMANTIC)
async def test_semantic_probe_sets_has_more(corpus: Corpus, mode: Mode) -> None:
    (project,) = await corpus.projects(1)
    await corpus.write(
        project.project_id, [Doc("note", str(i), f"aurora borealis {i}") for i in range(6)]
    )
    pages = [
        await corpus.search([project.project_id], mode, "aurora borealis", limit=2, offset=o)
        for o in (0, 2, 4, 6)
    ]
    assert [len(p.hits) for p in pages] == [2, 2, 2, 0]
    assert [p.has_more for p in pages] == [True, True, False, False]
    assert all(p.total is None for p in pages)
    assert len({k for p in pages for k in keys(p.hits)}) == 6


@pytest.mark.parametrize("mode", list(Mode))
async def test_small_pages_concatenate_to_the_full_list(corpus: Corpus, mode: Mode) -> None:
    scope = await _load(corpus, per_project=4)
    whole = await corpus.search(scope, mode, "comet orbit", limit=100)
    pieces: list[SearchHit] = []
    offset = 0
    while True:
        page = await corpus.search(scope, mode, "comet orbit", limit=2, offset=offset)
        pieces.extend(page.hits)
        offset += 2
        if not page.has_more:
            break
    assert _scored(tuple(pieces)) == _scored(whole.hits)
