"""Paging by identity against providers that change between pages and fail single requests.

The guarantee under test (docs/semantics.md, "Paging by identity"): across the pages of one
search, followed by page token, every result present at the provider from the first page
to the last is emitted exactly once; no result is emitted twice; results that appear or move
during paging may be emitted late; results deleted before they were emitted are gone; and
the last page carries no token only when every query is exhausted or waits for its
account's reconnect (those go on from their `next_cursor`s, and what they then emit counts
toward the same guarantee).

Then a quarter as many runs page one query on one account alone by its per-query
`next_cursor`, under the same changes and faults, and check the same guarantee for that
query's list.

Each seeded run builds a Slack, GitHub (kindless: an issues and a code leg) and Drive corpus,
GitHub and Drive searched through two accounts each that see the same items (one fused
result per item), pages through a four-query search with a random `top_k`, and between
pages inserts, deletes, edits and re-scores items at random, makes single provider requests
fail (429, 500, a reset connection, a kept-alive connection closed as the request arrives),
expires the page tokens Slack or Drive issued so far, and revokes an account's token,
reconnecting it 0-2 pages later (lists still waiting for it when the pages end go on by
their `next_cursor`).
Runs: SEARCH_TEST_PAGING_RUNS (default 200).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from service.fakes.suite import FakeProviders
from service.store.sqlite import SqliteStore
from service.workspace.model import ProviderId
from service.workspace.plan import NativeQuery
from service.workspace.results import canonical_url
from tests.integration.paging_corpus import WORD, seeded
from tests.integration.paging_runs import page_by_cursor, page_to_end, reconnect
from tests.integration.workspace_support import World, build_world

pytest_plugins = ["tests.fakes.fixtures"]

RUNS = int(os.environ.get("SEARCH_TEST_PAGING_RUNS", "200"))
QUERIES = (NativeQuery(ProviderId.SLACK, WORD), NativeQuery(ProviderId.GITHUB, WORD),
           NativeQuery(ProviderId.GOOGLE_DRIVE, WORD),
           NativeQuery(ProviderId.SLACK, f"{WORD} message"))


async def _run_once(world: World, accounts: Mapping[str, Sequence[str]], seed: int) -> None:
    rng = random.Random(seed)
    corpus = seeded(world.fakes, rng, revocations=True)
    await reconnect(world, accounts, list(accounts))  # the fakes' tokens after their reset
    top_k = rng.randrange(3, 12)
    emitted, calls = await page_to_end(world, accounts, corpus, QUERIES, top_k, canonical_url,
                                       f"seed {seed}")
    corpus.check_paged(emitted, f"seed {seed} ({calls} calls, top_k {top_k})")


CURSOR_RUNS = max(1, RUNS // 4)
ONE_LIST = {  # provider -> the URL prefixes of its items
    ProviderId.SLACK: ("https://acme.slack.com/",),
    ProviderId.GITHUB: ("https://github.com/",),
    ProviderId.GOOGLE_DRIVE: ("https://docs.google.com/",),
}


async def _run_cursor_once(world: World, accounts: Mapping[str, Sequence[str]],
                           seed: int) -> None:
    """One query paged alone by its `next_cursor`, under the same changes and faults."""
    rng = random.Random(10_000 + seed)
    corpus = seeded(world.fakes, rng, revocations=True)
    await reconnect(world, accounts, list(accounts))
    provider = list(ONE_LIST)[seed % len(ONE_LIST)]
    top_k = rng.randrange(3, 12)
    label = f"cursor seed {seed} ({provider.value}, top_k {top_k})"
    query = NativeQuery(provider, WORD, account_id=accounts[provider.value][0])
    emitted = await page_by_cursor(world, accounts, corpus, query, top_k, canonical_url, label)
    repeated = [url for url, n in Counter(emitted).items() if n > 1]
    assert not repeated, f"{label}: emitted twice: {repeated[:5]}"
    prefixes = ONE_LIST[provider]
    present = {canonical_url(u) for u in corpus.initial - corpus.deleted if u.startswith(prefixes)}
    missing = present - set(emitted)
    assert not missing, f"{label}: lost {missing}"


async def test_paging_by_identity_holds_under_random_changes_and_faults(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    store = SqliteStore(tmp_path / "search.sqlite3", None)
    await store.open()
    try:
        world = build_world(fakes, store)
        accounts = {provider.value: [await world.connect(provider)]
                    for provider in (ProviderId.SLACK, ProviderId.GITHUB, ProviderId.GOOGLE_DRIVE)}
        accounts["google_drive"].append(await world.connect(ProviderId.GOOGLE_DRIVE, "second"))
        accounts["github"].append(await world.connect(ProviderId.GITHUB, "second"))
        for seed in range(RUNS):
            await _run_once(world, accounts, seed)
        for seed in range(CURSOR_RUNS):
            await _run_cursor_once(world, accounts, seed)
    finally:
        await store.close()
