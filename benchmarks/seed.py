"""Seed comparison: a per-project loop (one search per project, merged here) vs one search.

Fixture of the founding PR: 3 projects, each with a note, an observation and a relation (row
id 500 in every project: the identities collide on purpose), 9 results in all. Also run on
the 100k-chunk corpus with a scope of 10 projects. Both ways run in the same process against
the same server, interleaved, so the ratio compares like with like.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.client import MODES, Client, Doc, Hit, Key, channel
from benchmarks.corpus import scopes
from benchmarks.measure import server_search_times
from benchmarks.servers import ServerHandle
from benchmarks.stats import ratio, summarize
from benchmarks.workbench import LoadedCorpus, Workbench, log

FIXTURE_TEXT = "shared nebula"
FIXTURE_KINDS = ("note", "observation", "relation")
PAGE_SIZE = 10
# Published in the founding PR (warm, repository level, not over gRPC): baseline -> combined.
PUBLISHED_MS = {
    ("sqlite", "vector"): (6.71, 1.94),
    ("sqlite", "hybrid"): (8.84, 2.04),
    ("postgres", "vector"): (229.24, 32.01),
    ("postgres", "hybrid"): (322.52, 39.56),
}


def fixture_docs(project_index: int) -> list[Doc]:
    """The three colliding documents of one fixture project."""
    return [
        Doc(kind, "500", f"shared nebula {kind}", "notes/shared.md",
            f"shared nebula project {project_index} {kind}")
        for kind in FIXTURE_KINDS
    ]


def merge(pages: Sequence[Sequence[Hit]], size: int) -> list[Hit]:
    """Per-project pages merged the way a caller would: by score, then identity."""
    hits = [h for page in pages for h in page]
    hits.sort(key=lambda h: (-h.score, h.key))
    return hits[:size]


@dataclass
class _Tally:
    """Client times per way, the call plan (to split server times), result-set agreement."""

    client: dict[str, list[float]] = field(
        default_factory=lambda: {"loop": [], "combined": []})
    plan: list[tuple[str, int]] = field(default_factory=list)  # (way, calls) in call order
    same: int = 0
    total: int = 0


async def _one_way(client: Client, way: str, scope: Sequence[int], text: str, mode: str,
                   tally: _Tally) -> set[Key]:
    started = time.perf_counter()
    if way == "loop":
        pages = [(await client.search([p], text, mode, page_size=PAGE_SIZE)).hits for p in scope]
        hits = merge(pages, PAGE_SIZE)
        tally.plan.append(("loop", len(scope)))
    else:
        hits = (await client.search(scope, text, mode, page_size=PAGE_SIZE)).hits
        tally.plan.append(("combined", 1))
    tally.client[way].append(time.perf_counter() - started)
    return {h.key for h in hits}


async def compare(
    server: ServerHandle, cases: Sequence[tuple[Sequence[int], str]], mode: str, reps: int,
    budget: float = float("inf"),
) -> dict[str, Any]:
    """Loop vs combined over `cases`, `reps` rounds, alternating which goes first.

    Stops after `budget` seconds once at least 3 cases ran (slow configurations).
    """
    tally = _Tally()
    async with channel(server.target) as ch:
        client = Client(ch)
        for case in cases[:2]:  # warm-up
            await client.search(case[0], case[1], mode, page_size=PAGE_SIZE)
        await server.take_timings()
        started = time.perf_counter()
        for rep, (number, (scope, text)) in itertools.product(range(reps), enumerate(cases)):
            if tally.total >= 3 and time.perf_counter() - started > budget:
                break
            order = ("loop", "combined") if (rep + number) % 2 == 0 else ("combined", "loop")
            keys = {way: await _one_way(client, way, scope, text, mode, tally) for way in order}
            tally.same += keys["loop"] == keys["combined"]
            tally.total += 1
    server_times = await server_search_times(server, sum(n for _, n in tally.plan))
    loop_server, combined_server = _split(tally.plan, server_times)
    return _row(tally.client["loop"], tally.client["combined"], loop_server, combined_server,
                tally.same, tally.total)


def _split(plan: list[tuple[str, int]], times: list[float]) -> tuple[list[float], list[float]]:
    loop: list[float] = []
    combined: list[float] = []
    position = 0
    for way, calls in plan:
        spent = sum(times[position:position + calls])
        position += calls
        (loop if way == "loop" else combined).append(spent)
    return loop, combined


def _row(
    loop_client: list[float], combined_client: list[float], loop_server: list[float],
    combined_server: list[float], same: int, total: int,
) -> dict[str, Any]:
    lc, cc = summarize(loop_client), summarize(combined_client)
    ls, cs = summarize(loop_server), summarize(combined_server)
    return {
        "loop": {"client": lc, "server": ls},
        "combined": {"client": cc, "server": cs},
        "ratio_client_p50": ratio(lc["p50_ms"], cc["p50_ms"]),
        "ratio_server_p50": ratio(ls["p50_ms"], cs["p50_ms"]),
        "same_identities": same / total if total else float("nan"),
        "cases": total,
    }


async def fixture(bench: Workbench, store: str, reps: int) -> list[dict[str, Any]]:
    """The 3-project / 9-result comparison on one store, every mode."""
    spec = await bench.spec(store)
    server = await bench.start(spec)
    try:
        async with channel(server.target) as ch:
            client = Client(ch)
            projects = [await client.create_project(f"seed-{i}") for i in range(3)]
            for i, project_id in enumerate(projects):
                await client.upsert(project_id, fixture_docs(i))
        await server.take_timings()
        rows = []
        for mode in MODES:
            row = await compare(server, [(projects, FIXTURE_TEXT)], mode, reps)
            published = PUBLISHED_MS.get((store, mode))
            row.update(store=store, mode=mode, case="3 projects / 9 results", reps=reps,
                       published_ms=list(published) if published else None)
            rows.append(row)
            _log(row)
        return rows
    finally:
        await bench.stop(server)


async def at_scale(corpus: LoadedCorpus, count: int, reps: int = 1,
                   budget: float = float("inf")) -> list[dict[str, Any]]:
    """The comparison on the loaded corpus: scope 10, `count` different queries per mode."""
    texts = corpus.bench.synthetic.queries(count, seed=23)
    picked = scopes(corpus.projects, count, 10, seed=29)
    cases = [(s, t) for s, t in zip(picked, texts, strict=True)]
    rows = []
    for mode in MODES:
        row = await compare(corpus.server, cases, mode, reps, budget)
        row.update(store=corpus.store, mode=mode, reps=reps,
                   case=f"{corpus.chunks:,} chunks / {len(corpus.projects)} projects / scope 10")
        rows.append(row)
        _log(row)
    return rows


def _log(row: dict[str, Any]) -> None:
    log(f"seed {row['store']} {row['mode']} ({row['case']}): loop/combined server p50 "
        f"x{row['ratio_server_p50']:.2f}, client p50 x{row['ratio_client_p50']:.2f}")
