"""Paging by identity on a busy machine, with providers that answer too late.

The randomized paging test (test_workspace_paging_random.py) changes the providers' data
and fails single requests at random, on the engine, on a quiet machine. What it cannot
show is time: a provider that answers after the request timeout, a call whose deadline
runs out while lists are still being read, an event loop that gets the CPU late. Here the
same guarantee (docs/semantics.md, "Paging by identity") is checked through the real
server and the client, with every core kept busy (`stress-ng` when it is installed, else
one spinning process per core), a short provider request timeout, faults that include
answers later than that timeout, tokens the user revokes and reconnects 0-2 pages later, and
calls with a deadline of their own: every result present from the first page to the last
is emitted exactly once, none twice, and nothing that never existed. A call that runs out
of time on the client (DEADLINE_EXCEEDED) is retried with the same page token, as a caller
would. The run must have met timeouts (a TIMED_OUT or partial status), else it proved
nothing. Then the same over the corpus of test_workspace_paging_random_legs.py (Gmail's
batched details, Calendar, Jira and Confluence legs, GitLab's six legs, Slack through two
accounts). Runs: SEARCH_TEST_BUSY_PAGING_RUNS (default 16 of each).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from search_client import (
    AsyncSearchClient,
    DeadlineExceededError,
    FusedPage,
    NativeQuery,
    Provider,
    QueryState,
    QueryStatus,
    RetryPolicy,
)
from service.fakes.suite import FakeProviders
from service.workspace.model import ProviderId
from service.workspace.results import canonical_url
from tests.integration.paging_corpus import WORD, seeded
from tests.integration.paging_corpus_legs import CQL, JQL, result_key, seeded_legs
from tests.support.server import running_server

pytest_plugins = ["tests.fakes.fixtures"]

RUNS = int(os.environ.get("SEARCH_TEST_BUSY_PAGING_RUNS", "16"))
MAX_CALLS = 160
REQUEST_TIMEOUT = 0.4  # seconds per provider request
LATE = 0.7  # a late answer: after the request timeout
CALL_TIMEOUTS = (None, 0.25, 0.5, 0.9, 1.5)  # a caller's own deadline, drawn per call
QUERIES = [
    NativeQuery(Provider.SLACK, WORD),
    NativeQuery(Provider.GITHUB, WORD),
    NativeQuery(Provider.GOOGLE_DRIVE, WORD),
    NativeQuery(Provider.SLACK, f"{WORD} message"),
]
LEGS_QUERIES = [
    NativeQuery(Provider.GMAIL, WORD),
    NativeQuery(Provider.GOOGLE_CALENDAR, WORD),
    NativeQuery(Provider.JIRA, JQL),
    NativeQuery(Provider.CONFLUENCE, CQL),
    NativeQuery(Provider.GITLAB, WORD),
    NativeQuery(Provider.SLACK, WORD),
]


@dataclass(frozen=True)
class Mix:
    """One randomized corpus: its queries, how it is seeded, how a result is known, and the
    accounts it searches (provider, display name)."""

    queries: list[NativeQuery]
    seed: Callable[[FakeProviders, random.Random], Any]
    key: Callable[[str], str]
    accounts: Sequence[tuple[Provider, str]]


MIXES = {
    "slack-github-drive": Mix(
        QUERIES, lambda fakes, rng: seeded(fakes, rng, slow=LATE, revocations=True),
        canonical_url,
        [(Provider.SLACK, "slack"), (Provider.GITHUB, "github"), (Provider.GITHUB, "github two"),
         (Provider.GOOGLE_DRIVE, "drive"), (Provider.GOOGLE_DRIVE, "drive two")],
    ),
    "legs": Mix(
        LEGS_QUERIES, lambda fakes, rng: seeded_legs(fakes, rng, slow=LATE), result_key,
        [(Provider.GMAIL, "gmail"), (Provider.GOOGLE_CALENDAR, "calendar"),
         (Provider.JIRA, "jira"), (Provider.CONFLUENCE, "confluence"),
         (Provider.GITLAB, "gitlab"), (Provider.SLACK, "one"), (Provider.SLACK, "two")],
    ),
}


@contextmanager
def busy_machine() -> Iterator[None]:
    """Every core busy while the block runs: `stress-ng` when it is installed, else one
    spinning Python process per core (a machine without stress-ng is still loaded)."""
    workers = os.cpu_count() or 2
    executable = shutil.which("stress-ng")
    commands = (
        [[executable, "--cpu", str(workers), "--timeout", "900s", "--quiet"]]
        if executable is not None
        else [[sys.executable, "-c", "import time\nend = time.monotonic() + 900\n"
               "while time.monotonic() < end: pass"]] * workers
    )
    processes = [subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for command in commands]
    try:
        yield
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


async def _page(client: AsyncSearchClient, queries: list[NativeQuery], token: str, top_k: int,
                deadline: float | None, seen: Counter[str],
                latest: dict[tuple[int, str], QueryStatus]) -> FusedPage:
    """One call with the caller's own deadline (seconds); statuses are counted into `seen`,
    and the last one of each query on each account kept in `latest`."""
    page = None
    async for item in client.search_workspace(queries, top_k=top_k, page_token=token,
                                              timeout=deadline):
        if isinstance(item, FusedPage):
            page = item
        else:
            seen[item.state.name] += 1
            seen["partial"] += item.partial
            latest[item.query_index, item.account_id] = item
    assert page is not None, "a call ended without its page"
    return page


async def _reconnect(client: AsyncSearchClient, fakes: FakeProviders,
                     accounts: Mapping[str, Sequence[str]], names: list[str]) -> None:
    for name in names:
        for account in accounts[name]:
            await client.update_account_credentials(account, fakes.of(ProviderId(name)).token)


async def _run_once(client: AsyncSearchClient, fakes: FakeProviders, mix: Mix,
                    accounts: Mapping[str, Sequence[str]], seed: int, seen: Counter[str]) -> None:
    rng = random.Random(50_000 + seed)
    corpus = mix.seed(fakes, rng)
    await _reconnect(client, fakes, accounts, list(accounts))  # the tokens after the reset
    top_k = rng.randrange(3, 12)
    emitted: list[str] = []
    queries, token = mix.queries, ""
    latest: dict[tuple[int, str], QueryStatus] = {}
    for calls in range(1, MAX_CALLS + 1):  # noqa: B007 - reported when an assertion fails
        try:
            page = await _page(client, queries, token, top_k, rng.choice(CALL_TIMEOUTS), seen,
                               latest)
        except DeadlineExceededError:
            seen["client deadline"] += 1
            continue  # the page never arrived: ask again with the same token
        emitted.extend(mix.key(r.url) for r in page.results)
        token = page.next_page_token
        if token:
            if queries is mix.queries:  # the resumed lists are read as the providers now stand
                await _reconnect(client, fakes, accounts, corpus.due())
                corpus.change()
            continue
        # Lists that still wait for a reconnect go on from their cursors, in a search of
        # their own (once).
        await _reconnect(client, fakes, accounts, corpus.due(all_=True))
        waiting = [replace(queries[i], cursor=s.next_cursor) for (i, _), s in latest.items()
                   if s.state is QueryState.NEEDS_RECONNECT and s.next_cursor]
        if not waiting or queries is not mix.queries:
            break
        seen["resumed from cursors"] += 1
        queries, latest = waiting, {}
    else:
        pytest.fail(f"seed {seed}: paging did not end within {MAX_CALLS} calls")
    corpus.check_paged(emitted, f"seed {seed} ({calls} calls, top_k {top_k})")


@pytest.mark.parametrize("mix", list(MIXES))
async def test_paging_by_identity_holds_on_a_busy_machine_with_late_providers(
    fakes: FakeProviders, tmp_path: Path, mix: str
) -> None:
    env = {
        "SEARCH_ALLOW_PRIVATE_BASE_URLS": "true",
        "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true",
        "SEARCH_PROVIDER_BASE_URLS": fakes.base_urls(),
        "SEARCH_PROVIDER_REQUEST_TIMEOUT": str(REQUEST_TIMEOUT),
        "SEARCH_SHARED_PROVIDER_WAITS": "false",
    }
    seen: Counter[str] = Counter()
    async with (
        running_server(tmp_path, env=env) as app,
        AsyncSearchClient(f"127.0.0.1:{app.port}", retry=RetryPolicy(max_attempts=1)) as client,
    ):
        accounts: dict[str, list[str]] = {}
        for provider, name in MIXES[mix].accounts:
            fake = fakes.of(ProviderId(provider.value))
            account = await client.connect_account(provider, name, fake.token)
            accounts.setdefault(fake.name, []).append(account.account_id)
        with busy_machine():
            for seed in range(RUNS):
                await _run_once(client, fakes, MIXES[mix], accounts, seed, seen)
    timed_out = seen[QueryState.TIMED_OUT.name] + seen["partial"] + seen["client deadline"]
    assert timed_out > 0, f"no request ran out of time, so nothing was tested: {dict(seen)}"
    assert seen[QueryState.NEEDS_RECONNECT.name], f"no token was revoked: {dict(seen)}"
