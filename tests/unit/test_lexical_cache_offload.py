"""A costly in-process lexical ranking runs off the event loop (postgres/lexical_cache.py).

The PostgreSQL store ranks FTS and HYBRID searches from postings it holds in process. A query
whose terms hold millions of postings in the scope (`c*`, common words over a large scope)
takes a ranking of tens to hundreds of milliseconds; ranked on the event loop, it would hold
every other call of the server for that long (the ticker below then gets no turn at all).
Here such a ranking (4M postings) runs while a ticker asks the loop for a turn every
millisecond: the ticker must get turns throughout, none waiting half the search. (A numpy
call that keeps the GIL can still delay a turn by its own length, a few ms to ~20 ms.)
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from service.store.lexical_index import ProjectPostings, Term, rank
from service.store.postgres.lexical_cache import THREAD_POSTINGS, PgLexicalCache, Shape

DOCUMENTS = 1_000_000
WORDS = ("alpha", "beta", "delta", "gamma")  # each in every document: 4M postings


class _NoDatabase:
    """The scope is held: the ranking must not read anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the database was used ({name})")


def _project() -> ProjectPostings:
    n = DOCUMENTS
    return ProjectPostings(
        generation=1, n=n, sum_dl=len(WORDS) * n,
        kinds=["note"] * n, row_ids=[f"{i:07d}" for i in range(n)],
        lengths=np.full(n, float(len(WORDS))), vocabulary=list(WORDS),
        starts=np.arange(0, (len(WORDS) + 1) * n, n, dtype=np.int64),
        docs=np.tile(np.arange(n, dtype=np.int32), len(WORDS)),
        tfs=np.ones(len(WORDS) * n, dtype=np.uint16),
    )


async def test_a_costly_ranking_leaves_the_event_loop_free() -> None:
    project = _project()
    terms = tuple(Term(word, False) for word in WORDS)
    assert len(project.docs) > THREAD_POSTINGS
    alone = rank([project], list(terms), 1.2, 0.75, len(terms), True, 10)

    cache = PgLexicalCache(1 << 31)
    assert cache._lru.put(7, project)  # held, as after its first search
    shape = Shape(terms, len(terms), True, " & ".join(f"'{w}'" for w in WORDS), None)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    gaps: list[float] = []

    async def ticker() -> None:
        last = loop.time()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = loop.time()
            gaps.append(now - last)
            last = now

    async def search() -> Any:
        try:
            return await cache.propose(_NoDatabase(), [7], shape, 1.2, 0.75, 10)
        finally:
            done.set()

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker starts its first wait
    started = time.perf_counter()
    proposal = await search()
    seconds = time.perf_counter() - started
    await ticking
    assert proposal is not None
    assert proposal.ranking.total == alone.total == DOCUMENTS
    assert proposal.ranking.scores.tolist() == alone.scores.tolist()
    assert len(gaps) > 3, "the ticker never ran while the ranking did"
    assert max(gaps) < seconds / 2, (max(gaps), seconds)
