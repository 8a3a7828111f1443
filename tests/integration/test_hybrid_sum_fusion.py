"""HYBRID's default fusion, SUM (f + v / v_max), on both stores and both lexical paths.

SUM reads the lexical list by score alone, while FTS and RRF read it by tier first. When
the lexical cache ranks the list in process it passes the statement only the first rows
and the vector channel's documents, so those first rows must be the first by score: here
a short document holding one query word three times (a relaxed match, vectorless, so the
vector channel never brings it) outscores every document holding both words. Its `f` is 1
and every other `f` is relative to it, whichever path ranked and whatever the page size.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from service.embeddings.deterministic import DeterministicEmbedder
from service.store.base import Fusion, Mode
from tests.integration.conftest import Corpus, Doc, fresh_backend
from tests.integration.lexical_cache_support import cached_and_plain, page_key

STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor"


def _docs() -> list[Doc]:
    # Documents holding both words, long (a lower BM25) and vectorless; documents the vector
    # channel finds (the best of them scores exactly 1) that hold neither word; and the short
    # relaxed one, also exactly 1, first among equals by its kind.
    strict = [
        Doc("note", f"both{i:02d}", f"nebula {FILLER} quasar {FILLER} {i}", vectors="none")
        for i in range(12)
    ]
    others = [Doc("note", f"other{i:02d}", f"{FILLER} {i} orbit") for i in range(60)]
    relaxed = Doc("aside", "loud", "nebula nebula nebula", vectors="none")
    return [*strict, *others, relaxed]


@pytest_asyncio.fixture(params=STORES)
async def pair(
    request: pytest.FixtureRequest, tmp_path: Path, embedder: DeterministicEmbedder
) -> AsyncIterator[tuple[Corpus, Corpus]]:
    """Two stores on one database: one ranks the lexical list in process, one in SQL."""
    async with (
        fresh_backend(request.param, request, tmp_path) as backend,
        cached_and_plain(backend, embedder) as corpora,
    ):
        yield corpora


async def test_sum_reads_the_lexical_list_by_score_on_both_paths(
    pair: tuple[Corpus, Corpus],
) -> None:
    fast, plain = pair
    project = (await fast.project("sum")).project_id
    plain.owners[project] = fast.tenant
    await fast.write(project, _docs())
    scope = [project]

    fts = await plain.search(scope, Mode.FTS, "nebula quasar", limit=20)
    assert fts.relaxed
    assert fts.hits[-1].row_id == "loud"  # last by tier, first by score
    loud = max(fts.hits, key=lambda h: h.fts_score)
    assert loud.row_id == "loud"

    # exact_scan_limit 5: the nearest-neighbour path, whose candidates are not every chunk.
    for exact_scan_limit in (5, 50_000):
        for limit, offset in ((1, 0), (3, 0), (2, 3), (40, 0)):
            kw = {"limit": limit, "offset": offset, "exact_scan_limit": exact_scan_limit}
            got = await fast.search(scope, Mode.HYBRID, "nebula quasar", **kw)
            want = await plain.search(scope, Mode.HYBRID, "nebula quasar", **kw)
            assert page_key(got) == page_key(want), kw
            for hit in got.hits:  # f is relative to the best lexical match, the relaxed one
                assert hit.fts_normalized == pytest.approx(hit.fts_score / loud.fts_score)
                assert hit.fts_normalized + hit.vector_score == 0 or hit.score > 0
            if offset == 0:
                assert (got.hits[0].row_id, got.hits[0].score) == ("loud", 1.0), kw
                assert got.hits[0].vector_score == 0.0

    # On the exact path a document's score and place do not depend on the page size.
    whole = await fast.search(scope, Mode.HYBRID, "nebula quasar", limit=12)
    pages = [await fast.search(scope, Mode.HYBRID, "nebula quasar", limit=4, offset=o)
             for o in (0, 4, 8)]
    hits = [(h.row_id, h.score) for h in whole.hits]
    assert [[(h.row_id, h.score) for h in p.hits] for p in pages] == [
        hits[i:i + 4] for i in (0, 4, 8)
    ]

    # RRF still reads it by tier: the relaxed document is ranked after the strict ones.
    rrf = await fast.search(scope, Mode.HYBRID, "nebula quasar", limit=40, fusion=Fusion.RRF)
    assert [h.row_id for h in rrf.hits].index("loud") > 0
    assert page_key(rrf) == page_key(
        await plain.search(scope, Mode.HYBRID, "nebula quasar", limit=40, fusion=Fusion.RRF)
    )
