"""The randomized provider corpus of the paging tests: Slack messages, GitHub issues and code,
Drive files, tracked by URL, and random changes and faults between pages."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from service.fakes.suite import FakeProviders
from service.workspace.model import ProviderId
from service.workspace.results import canonical_url

WORD = "alpha"
REPO = "acme/app"


@dataclass
class Tracked:
    """What the randomized paging tests track of the fakes: the items present when paging
    began, deleted since and ever held (by the test's key), and the tokens revoked."""

    fakes: FakeProviders
    rng: random.Random
    initial: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    ever: set[str] = field(default_factory=set)
    serial: int = 0
    slow: float = 0.0  # > 0: a fault may also answer this many seconds late
    # Providers whose token the user revoked, with the pages left before they reconnect
    # (the test's loop reconnects them: `due`).
    revoked: dict[str, int] = field(default_factory=dict)

    def _next(self) -> int:
        self.serial += 1
        return self.serial

    def _revoke(self, names: Sequence[str]) -> None:
        """The user revokes one provider's token; it is reconnected after 0-2 more pages."""
        name = self.rng.choice(names)
        if name not in self.revoked:
            self.fakes.of(ProviderId(name)).revoke_token()
            self.revoked[name] = self.rng.randrange(3)

    def due(self, *, all_: bool = False) -> list[str]:
        """The revoked providers to reconnect now (every one with `all_`); the others wait
        one more page."""
        ready = [n for n, pages in self.revoked.items() if all_ or pages == 0]
        for name in list(self.revoked):
            if name in ready:
                del self.revoked[name]
            else:
                self.revoked[name] -= 1
        return ready


@dataclass
class Corpus(Tracked):
    """What each fake holds, tracked by URL: the test's view of the providers."""

    revocations: bool = False  # a change may revoke an account's token (the test reconnects)

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

    def check_paged(self, emitted: Sequence[str], label: str) -> None:
        """The guarantee over one paging (canonical URLs in emission order): nothing emitted
        twice, every item present from the first page to the last emitted, nothing that
        never existed."""
        repeated = [url for url, n in Counter(emitted).items() if n > 1]
        assert not repeated, f"{label}: emitted twice: {repeated[:5]}"
        present = {canonical_url(u) for u in self.initial - self.deleted}
        missing = present - set(emitted)
        assert not missing, f"{label}: never emitted {missing}"
        unknown = set(emitted) - {canonical_url(u) for u in self.ever}
        assert not unknown, f"{label}: emitted what never existed: {unknown}"

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
        kind = self.rng.randrange(5 if self.slow else 4)
        if kind == 3:  # the provider closed a kept-alive connection as the request went out
            stale = fake.close_kept_alive(path=path, times=1)
            stale.on_call = call
        elif kind == 4:
            late = fake.slow(self.slow, path=path, times=1)
            late.on_call = call
        elif kind == 0:
            fake.fail_call(path, call, 429, headers={"Retry-After": "0"})
        elif kind == 1:
            fake.fail_call(path, call, 500)
        else:  # two in a row: a request on a kept-alive connection is sent once more
            fake.reset_connection(path=path, times=2)

    def expire(self) -> None:
        """Expire the page tokens Slack or Drive issued so far, as a caller who comes back
        later finds them (GitHub pages by number: nothing expires)."""
        self.rng.choice([self.fakes.slack, self.fakes.google_drive]).expire_page_tokens()

    def revoke(self) -> None:
        """The user revokes one account's token; it is reconnected after 0-2 more pages."""
        self._revoke(["slack", "github", "google_drive"])

    def change(self) -> None:
        """A random handful of changes and faults."""
        actions: list[Callable[[], None]] = [
            self.delete, self.insert, self.rescore, self.edit, self.fault, self.expire,
            *([self.revoke] if self.revocations else []),
        ]
        for _ in range(self.rng.randrange(4)):
            self.rng.choice(actions)()


def seeded(
    fakes: FakeProviders, rng: random.Random, *, slow: float = 0.0, revocations: bool = False
) -> Corpus:
    """Fresh fakes holding a random Slack, GitHub (issues and code) and Drive corpus;
    `slow` > 0 adds answers that late to the faults; `revocations` lets changes revoke
    tokens (the fakes' reset restores them: the test stores them for its accounts again)."""
    fakes.reset()
    fakes.github.add_repo(REPO)
    corpus = Corpus(fakes, rng, slow=slow, revocations=revocations)
    for make, low, high in ((corpus.add_message, 5, 45), (corpus.add_issue, 0, 25),
                            (corpus.add_code, 0, 25), (corpus.add_file, 0, 30)):
        for _ in range(rng.randrange(low, high)):
            make()
    corpus.initial = corpus.urls()
    return corpus
