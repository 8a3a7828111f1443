"""Paging by identity where a list has more moving parts than one provider page and token.

The guarantee of `test_workspace_paging_random.py` (docs/semantics.md, "Paging by
identity"), checked where that test does not reach: Gmail, whose list answers hold ids and
whose details are read in batches (a message deleted between the two, one message's read
refused); Google Calendar over two calendars, Jira and Confluence over two sites each, whose
lists keep one page token per leg (one leg's token expiring alone, one leg's request
failing); GitLab over two projects and three kinds (six legs paged by page number, items
re-ordered between pages); and Slack searched through two accounts that see the same
messages, whose results are one fused result each, emitted once.

Each seeded run pages a seven-query search (Gmail twice: with a time range too, which reads
every listed message's details with its page) with a random `top_k`; between pages it inserts,
deletes and moves items, fails single requests (429, 500, reset connections, kept-alive
connections closed), fails single message reads, expires page tokens (a provider's, or one
calendar's), and revokes a provider's token, reconnecting its accounts 0-2 pages later.
Lists still waiting for a reconnect when the pages end go on by their `next_cursor`.
Then a quarter as many runs page the Gmail, Calendar, Jira, Confluence or GitLab query alone
by its `next_cursor` (which carries every leg's page token), under the same changes and
faults. Runs: SEARCH_TEST_PAGING_LEGS_RUNS (default 100).
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from service.fakes.suite import FakeProviders
from service.store.sqlite import SqliteStore
from service.workspace.model import ProviderId
from service.workspace.plan import NativeQuery
from tests.integration.paging_corpus_legs import (
    CQL,
    JQL,
    WINDOW,
    WORD,
    result_key,
    seeded_legs,
)
from tests.integration.paging_runs import page_by_cursor, page_to_end, reconnect
from tests.integration.workspace_support import World, build_world

pytest_plugins = ["tests.fakes.fixtures"]

RUNS = int(os.environ.get("SEARCH_TEST_PAGING_LEGS_RUNS", "100"))
QUERIES = (NativeQuery(ProviderId.GMAIL, WORD), NativeQuery(ProviderId.GOOGLE_CALENDAR, WORD),
           NativeQuery(ProviderId.JIRA, JQL), NativeQuery(ProviderId.CONFLUENCE, CQL),
           NativeQuery(ProviderId.GITLAB, WORD), NativeQuery(ProviderId.SLACK, WORD),
           # With a time range every listed message's details are read with its page (a
           # failed read keeps the page in the token), not only those about to be emitted.
           NativeQuery(ProviderId.GMAIL, f"{WORD} text", time_range=WINDOW))


async def _run_once(world: World, accounts: Mapping[str, Sequence[str]], seed: int) -> None:
    rng = random.Random(20_000 + seed)
    corpus = seeded_legs(world.fakes, rng)
    await reconnect(world, accounts, list(accounts))  # the fakes' tokens after their reset
    top_k = rng.randrange(3, 12)
    emitted, calls = await page_to_end(world, accounts, corpus, QUERIES, top_k, result_key,
                                       f"seed {seed}")
    corpus.check_paged(emitted, f"seed {seed} ({calls} calls, top_k {top_k})")


CURSOR_RUNS = max(1, RUNS // 4)
ONE_LIST = {  # provider -> the key prefix of its results
    ProviderId.GMAIL: "gmail:", ProviderId.GOOGLE_CALENDAR: "calendar:", ProviderId.JIRA: "jira:",
    ProviderId.GITLAB: "gitlab:", ProviderId.CONFLUENCE: "confluence:",
}


async def _run_cursor_once(world: World, accounts: Mapping[str, Sequence[str]],
                           seed: int) -> None:
    """One query paged alone by its `next_cursor`, under the same changes and faults."""
    rng = random.Random(30_000 + seed)
    corpus = seeded_legs(world.fakes, rng)
    await reconnect(world, accounts, list(accounts))
    provider = list(ONE_LIST)[seed % len(ONE_LIST)]
    query = QUERIES[[q.provider for q in QUERIES].index(provider)]
    top_k = rng.randrange(3, 12)
    label = f"cursor seed {seed} ({provider.value}, top_k {top_k})"
    emitted = await page_by_cursor(world, accounts, corpus, query, top_k, result_key, label)
    prefix = ONE_LIST[provider]
    corpus.check_paged([k for k in emitted if k.startswith(prefix)], label, prefix)


async def test_paging_by_identity_holds_over_legs_batches_and_shared_accounts(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    store = SqliteStore(tmp_path / "search.sqlite3", None)
    await store.open()
    try:
        world = build_world(fakes, store)
        accounts = {
            "gmail": [await world.connect(ProviderId.GMAIL)],
            "google_calendar": [await world.connect(ProviderId.GOOGLE_CALENDAR)],
            "jira": [await world.connect(ProviderId.JIRA)],
            "confluence": [await world.connect(ProviderId.CONFLUENCE)],
            "gitlab": [await world.connect(ProviderId.GITLAB)],
            "slack": [await world.connect(ProviderId.SLACK, "one"),
                      await world.connect(ProviderId.SLACK, "two")],
        }
        for seed in range(RUNS):
            await _run_once(world, accounts, seed)
        for seed in range(CURSOR_RUNS):
            await _run_cursor_once(world, accounts, seed)
    finally:
        await store.close()
