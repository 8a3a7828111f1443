"""Shared by both stores: index-path candidate counts, the probe row, totals, matched chunks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from service.store.base import MatchedChunk, Mode, SearchHit, SearchPage, SearchPlan

# Documents have several chunks and filters drop candidates after the index search: the
# index path over-fetches chunks per wanted document. Its cost grows about linearly in k
# (every visited tuple is checked against the scope), so without filters the margin is
# smaller: 5 nearest chunks per wanted document, 10 when filters may drop candidates.
KNN_MIN_K = 50
KNN_OVERFETCH = 5
KNN_MIN_K_FILTERED = 100
KNN_OVERFETCH_FILTERED = 10


def knn_k(wanted: int, filtered: bool, cap: int) -> int:
    """Chunks the index search returns for `wanted` documents, at most `cap`."""
    if filtered:
        return max(KNN_MIN_K_FILTERED, min(cap, wanted * KNN_OVERFETCH_FILTERED))
    return max(KNN_MIN_K, min(cap, wanted * KNN_OVERFETCH))


def assemble_page(
    plan: SearchPlan, hits: Sequence[SearchHit], *, relaxed: bool, exact: bool, total: Any
) -> SearchPage:
    """FTS pages carry the exact `total`; semantic ones read `limit + 1` rows to probe more."""
    if plan.mode is Mode.FTS:
        count = int(total)
        return SearchPage(tuple(hits), count, plan.offset + len(hits) < count, relaxed, True)
    has_more = len(hits) > plan.limit
    return SearchPage(tuple(hits[: plan.limit]), None, has_more, relaxed, exact)


def parse_chunks(text: str | None) -> tuple[MatchedChunk, ...]:
    """Matched chunks from the statement's JSON `[[index, text, similarity], ...]`, best first."""
    if not text:
        return ()
    items = [MatchedChunk(int(i), str(t), float(s)) for i, t, s in json.loads(text)]
    items.sort(key=lambda c: (-c.similarity, c.index))
    return tuple(items)
