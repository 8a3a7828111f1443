"""Paging by identity against providers that change between pages and fail single requests.

The guarantee under test (docs/semantics.md, "Paging by identity"): across the pages of one
search, followed by page token, every result present at the provider from the first page
to the last is emitted exactly once; no result is emitted twice; results that appear or move
during paging may be emitted late; results deleted before they were emitted are gone; and
the last page carries no token only when every query is exhausted.

Then a quarter as many runs page one query alone by its per-query `next_cursor`, under the
same changes and faults, and check the same guarantee for that query's list.

Each seeded run builds a Slack, GitHub (kindless: an issues and a code leg) and Drive corpus,
pages through a four-query search with a random `top_k`, and between pages inserts, deletes,
edits and re-scores items at random and makes single provider requests fail (429, 500, a
reset connection). Runs: SEARCH_TEST_PAGING_RUNS (default 200).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from service.fakes.suite import FakeProviders
from service.store.sqlite import SqliteStore
from service.workspace.lists import canonical_url
from service.workspace.model import ProviderId
from service.workspace.plan import NativeQuery
from tests.integration.workspace_support import World, build_world

pytest_plugins = ["tests.fakes.fixtures"]

RUNS = int(os.environ.get("SEARCH_TEST_PAGING_RUNS", "200"))
MAX_CALLS = 120  # a run that needs more calls than this never ends: a failure
WORD = "alpha"
REPO = "acme/app"


@dataclass
class Corpus:
    """What each fake holds, tracked by URL: the test's view of the providers."""

    fakes: FakeProviders
    rng: random.Random
    initial: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    ever: set[str] = field(default_factory=set)
    serial: int = 0

    def _next(self) -> int:
        self.serial += 1
        return self.serial

    # ---- seeding --------------------------------------------------------------------------
    def add_message(self) -> None:
        n = self._next()
        ts = f"{1_700_000_000 + n * 37}.{n:06d}"
        self.fakes.slack.add_message("C1", "general", ts, f"{WORD} message {n}")
        self.ever.add(self._slack_url(self.fakes.slack.messages[-1]))

    def add_issue(self) -> None:
        n = self._next()
        self.fakes.github.add_issue(REPO, n, f"{WORD} issue {n}", "body")
        self.fakes.github.items["issues"][-1]["score"] = self.rng.random()
        self.ever.add(self.fakes.github.items["issues"][-1]["html_url"])

    def add_code(self) -> None:
        n = self._next()
        self.fakes.github.add_code(REPO, f"src/file{n}.py", f"{WORD} = {n}")
        self.fakes.github.items["code"][-1]["score"] = self.rng.random()
        self.ever.add(self.fakes.github.items["code"][-1]["html_url"])

    def add_file(self) -> None:
        n = self._next()
        when = f"2024-{1 + n % 12:02d}-{1 + n % 28:02d}T{n % 24:02d}:00:{n % 60:02d}Z"
        self.fakes.google_drive.add_file(f"f{n}", f"{WORD} notes {n}", "text", modified=when)
        self.ever.add(self.fakes.google_drive.files[-1]["webViewLink"])

    @staticmethod
    def _slack_url(message: dict[str, object]) -> str:
        return str(message["permalink"])

    def urls(self) -> set[str]:
        """Every item the providers hold now."""
        slack = {self._slack_url(m) for m in self.fakes.slack.messages}
        github = {i["html_url"] for kind in ("issues", "code")
                  for i in self.fakes.github.items[kind]}
        drive = {f["webViewLink"] for f in self.fakes.google_drive.files}
        return {str(u) for u in slack | github | drive}

    # ---- changes between pages ------------------------------------------------------------
    def _pools(self) -> list[list[dict[str, object]]]:
        return [self.fakes.slack.messages, self.fakes.github.items["issues"],
                self.fakes.github.items["code"], self.fakes.google_drive.files]

    def delete(self) -> None:
        pool = self.rng.choice([p for p in self._pools() if p] or [[]])
        if not pool:
            return
        item = pool.pop(self.rng.randrange(len(pool)))
        url = item.get("permalink") or item.get("html_url") or item.get("webViewLink")
        self.deleted.add(str(url))

    def insert(self) -> None:
        self.rng.choice([self.add_message, self.add_issue, self.add_code, self.add_file])()

    def rescore(self) -> None:
        """Move an item in its list: a new relevance score, a Slack re-rank, a Drive edit."""
        choice = self.rng.randrange(3)
        if choice == 0:
            items = self.fakes.github.items[self.rng.choice(["issues", "code"])]
            if items:
                self.rng.choice(items)["score"] = self.rng.random()
        elif choice == 1 and self.fakes.slack.messages:
            self.rng.choice(self.fakes.slack.messages)["_rank"] = self.rng.randrange(3)
        elif self.fakes.google_drive.files:
            edited = self.rng.choice(self.fakes.google_drive.files)
            edited["modifiedTime"] = f"2025-0{self.rng.randrange(1, 10)}-01T00:00:00Z"

    def edit(self) -> None:
        """Change an item's text, still matching the query."""
        if self.fakes.slack.messages:
            message = self.rng.choice(self.fakes.slack.messages)
            message["content"] = f"{WORD} edited {self._next()}"

    def fault(self) -> None:
        """Make one of the next provider requests fail."""
        fake, path = self.rng.choice([
            (self.fakes.slack, "/api/assistant.search.context"),
            (self.fakes.github, "/search/issues"),
            (self.fakes.github, "/search/code"),
            (self.fakes.google_drive, "/drive/v3/files"),
        ])
        call = self.rng.randrange(1, 4)
        kind = self.rng.randrange(3)
        if kind == 0:
            fake.fail_call(path, call, 429, headers={"Retry-After": "0"})
        elif kind == 1:
            fake.fail_call(path, call, 500)
        else:
            fault = fake.reset_connection(path=path, times=1)
            fault.on_call = call

    def change(self) -> None:
        """A random handful of changes and faults."""
        actions: list[Callable[[], None]] = [
            self.delete, self.insert, self.rescore, self.edit, self.fault,
        ]
        for _ in range(self.rng.randrange(4)):
            self.rng.choice(actions)()


def _seeded(world: World, rng: random.Random) -> Corpus:
    """Fresh fakes holding a random Slack, GitHub (issues and code) and Drive corpus."""
    world.fakes.reset()
    world.fakes.github.add_repo(REPO)
    corpus = Corpus(world.fakes, rng)
    for make, low, high in ((corpus.add_message, 5, 45), (corpus.add_issue, 0, 25),
                            (corpus.add_code, 0, 25), (corpus.add_file, 0, 30)):
        for _ in range(rng.randrange(low, high)):
            make()
    corpus.initial = corpus.urls()
    return corpus


async def _run_once(world: World, seed: int) -> None:
    rng = random.Random(seed)
    corpus = _seeded(world, rng)
    queries = [NativeQuery(ProviderId.SLACK, WORD), NativeQuery(ProviderId.GITHUB, WORD),
               NativeQuery(ProviderId.GOOGLE_DRIVE, WORD),
               NativeQuery(ProviderId.SLACK, f"{WORD} message")]
    top_k = rng.randrange(3, 12)
    emitted: list[str] = []
    token = ""
    calls = 0
    for calls in range(1, MAX_CALLS + 1):  # noqa: B007 - reported when an assertion fails
        outcome = await world.search(queries, top_k=top_k, page_token=token)
        (page,) = outcome.pages
        emitted.extend(canonical_url(r.url) for r in page.results)
        token = page.next_page_token
        if not token:
            break
        corpus.change()
    else:
        pytest.fail(f"seed {seed}: paging did not end within {MAX_CALLS} calls")
    repeated = [url for url, n in Counter(emitted).items() if n > 1]
    assert not repeated, f"seed {seed}: emitted twice: {repeated[:5]}"
    present = {canonical_url(u) for u in corpus.initial - corpus.deleted}
    missing = present - set(emitted)
    assert not missing, f"seed {seed} ({calls} calls, top_k {top_k}): never emitted {missing}"
    unknown = set(emitted) - {canonical_url(u) for u in corpus.ever}
    assert not unknown, f"seed {seed}: emitted what never existed: {unknown}"


CURSOR_RUNS = max(1, RUNS // 4)
ONE_LIST = {  # provider -> the URL prefixes of its items
    ProviderId.SLACK: ("https://acme.slack.com/",),
    ProviderId.GITHUB: ("https://github.com/",),
    ProviderId.GOOGLE_DRIVE: ("https://docs.google.com/",),
}


async def _run_cursor_once(world: World, seed: int) -> None:
    """One query paged alone by its `next_cursor`, under the same changes and faults."""
    rng = random.Random(10_000 + seed)
    corpus = _seeded(world, rng)
    provider = list(ONE_LIST)[seed % len(ONE_LIST)]
    top_k = rng.randrange(3, 12)
    emitted: list[str] = []
    cursor = ""
    for _ in range(MAX_CALLS):
        outcome = await world.search([NativeQuery(provider, WORD, cursor=cursor)], top_k=top_k)
        (page,) = outcome.pages
        emitted.extend(canonical_url(r.url) for r in page.results)
        (status,) = outcome.latest().values()
        cursor = status.next_cursor
        if not cursor:
            break
        corpus.change()
    else:
        pytest.fail(f"cursor seed {seed}: paging did not end within {MAX_CALLS} calls")
    repeated = [url for url, n in Counter(emitted).items() if n > 1]
    assert not repeated, f"cursor seed {seed}: emitted twice: {repeated[:5]}"
    prefixes = ONE_LIST[provider]
    present = {canonical_url(u) for u in corpus.initial - corpus.deleted if u.startswith(prefixes)}
    missing = present - set(emitted)
    assert not missing, f"cursor seed {seed} ({provider.value}, top_k {top_k}): lost {missing}"


async def test_paging_by_identity_holds_under_random_changes_and_faults(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    store = SqliteStore(tmp_path / "search.sqlite3", None)
    await store.open()
    try:
        world = build_world(fakes, store)
        for provider in (ProviderId.SLACK, ProviderId.GITHUB, ProviderId.GOOGLE_DRIVE):
            await world.connect(provider)
        for seed in range(RUNS):
            await _run_once(world, seed)
        for seed in range(CURSOR_RUNS):
            await _run_cursor_once(world, seed)
    finally:
        await store.close()
