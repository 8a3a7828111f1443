"""Page assembly shared by both stores: the probe row, exact totals, matched chunks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from service.store.base import MatchedChunk, Mode, SearchHit, SearchPage, SearchPlan


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
