"""What the two stores' lexical-cache tests share: the words their random documents are made
of (stems shared by several words, prefixes of other words, numbers, a stopword), a page
reduced to what must be equal bit for bit, and the pair of stores compared."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from service.embeddings.deterministic import DeterministicEmbedder
from service.store.base import SearchPage
from tests.integration.conftest import Backend, Corpus

WORDS = (
    "deploy", "deployed", "deploying", "deployment", "freeze", "frozen", "freezer", "window",
    "windows", "win", "winter", "star", "stars", "starting", "stardust", "start", "2024",
    "2025", "202", "orbit", "orbital", "the", "release", "released",
)


def random_text(rng: random.Random) -> str:
    """One to eight of WORDS."""
    return " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 9)))


def page_key(page: SearchPage) -> tuple[object, ...]:
    """Documents, order, every score, total, relaxation, has_more and exactness."""
    hits = tuple(
        (h.project_id, h.kind, h.row_id, h.score, h.fts_score, h.fts_normalized, h.vector_score)
        for h in page.hits
    )
    return hits, page.total, page.relaxed, page.has_more, page.ranking_is_exact


@asynccontextmanager
async def cached_and_plain(
    backend: Backend, embedder: DeterministicEmbedder
) -> AsyncIterator[tuple[Corpus, Corpus]]:
    """Two stores on one database, one ranking the lexical channel from its cache, one in SQL.
    Both with the vector cache, so a HYBRID search's vector channel is the same exact nearest
    chunks on both when it takes the nearest-neighbour path."""
    fast = await backend.open(
        embedder.identity, lexical_cache_bytes=64 << 20, vector_cache_bytes=64 << 20
    )
    plain = await backend.open(
        embedder.identity, lexical_cache_bytes=0, vector_cache_bytes=64 << 20
    )
    try:
        yield Corpus(fast, embedder, "acme"), Corpus(plain, embedder, "acme")
    finally:
        await plain.close()
        await fast.close()
