"""What the two stores' lexical-cache tests share: the words their random documents are made
of (stems shared by several words, prefixes of other words, numbers, a stopword) and a page
reduced to what must be equal bit for bit."""

from __future__ import annotations

import random

from service.store.base import SearchPage

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
