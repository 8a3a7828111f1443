"""The randomized corpus of the second paging test: the providers whose paging has more moving
parts than one list and one token. Gmail (a list, then each listed message's details read in
batches), Google Calendar over two calendars, Jira and Confluence over two sites each (one page
token per leg),
GitLab over two projects and three kinds (six legs paged by page number), and Slack searched
through two accounts that see the same messages (one fused result per message). Items are
tracked by a key read off their URL, with random changes and faults between pages."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from service.fakes.suite import FakeProviders
from service.timerange import TimeRange
from tests.integration.paging_corpus import Tracked

WORD = "alpha"
CALENDARS = ("primary", "team")
SITES = (("cloud-1", "acme", "AC"), ("cloud-2", "beta", "BE"))  # cloud id, site name, key prefix
BASE = datetime(2026, 3, 1, tzinfo=UTC)
WINDOW = TimeRange(BASE - timedelta(days=1), BASE + timedelta(days=61))  # holds every date
JQL = f'text ~ "{WORD}" ORDER BY updated DESC'
CQL = f'text ~ "{WORD}"'
PROJECTS = {1: "acme/app", 2: "acme/web"}
GITLAB = "https://gitlab.example.com"
PROVIDERS = ("gmail", "google_calendar", "jira", "confluence", "gitlab", "slack")


def result_key(url: str) -> str:
    """The test's identity of an emitted result, read off its URL."""
    parts = urlsplit(url)
    if parts.hostname == "mail.google.com":
        return "gmail:" + unquote(parts.fragment.removeprefix("all/"))
    if parts.hostname == "calendar.google.com":
        return "calendar:" + parse_qs(parts.query)["eid"][0]
    if parts.hostname and parts.hostname.endswith(".atlassian.net"):
        product = "confluence:" if parts.path.startswith("/wiki/") else "jira:"
        return product + parts.path.rsplit("/", 1)[-1]
    if parts.hostname == "gitlab.example.com":
        return "gitlab:" + unquote(parts.path)
    return "slack:" + url


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _jira_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000+0000")


@dataclass
class LegsCorpus(Tracked):
    """What each fake holds, by key: the test's view of the providers."""

    def _when(self) -> datetime:
        return BASE + timedelta(minutes=self.rng.randrange(60 * 24 * 60))

    # ---- seeding --------------------------------------------------------------------------
    def add_mail(self) -> None:
        n = self._next()
        self.fakes.gmail.add_message(f"m{n}", f"{WORD} mail {n}", f"{WORD} text {n}",
                                     sent=self._when())
        self.ever.add(f"gmail:m{n}")

    def add_event(self) -> None:
        n = self._next()
        start = self._when()
        self.fakes.google_calendar.add_event(
            self.rng.choice(CALENDARS), f"e{n}", f"{WORD} meeting {n}", start=_iso(start),
            end=_iso(start + timedelta(minutes=30)))
        self.ever.add(f"calendar:e{n}")

    def add_issue(self) -> None:
        n = self._next()
        cloud, _, prefix = self.rng.choice(SITES)
        self.fakes.jira.add_issue(cloud, f"{prefix}-{n}", f"{WORD} issue {n}", "body",
                                  updated=_jira_time(self._when()))
        self.ever.add(f"jira:{prefix}-{n}")

    def add_page(self) -> None:
        """A Confluence page in one of two sites, anywhere in the order."""
        n = self._next()
        cloud = self.rng.choice(SITES)[0]
        self.fakes.confluence.add_content(cloud, f"c{n}", f"{WORD} page {n}", f"{WORD} text")
        items = self.fakes.confluence.items[cloud]
        items.insert(self.rng.randrange(len(items)), items.pop())
        self.ever.add(f"confluence:c{n}")

    def add_gitlab(self) -> None:
        """An issue, merge request or file in one of two projects, anywhere in the order."""
        n = self._next()
        project = self.rng.choice(list(PROJECTS))
        if self.rng.random() < 0.6:
            self.fakes.gitlab.add_issue(project, n, f"{WORD} issue {n}", "body",
                                        merge_request=self.rng.random() < 0.4)
        else:
            self.fakes.gitlab.add_blob(project, f"src/f{n}.py", f"{WORD} = {n}")
        items = self.fakes.gitlab.items
        item = items.pop()
        items.insert(self.rng.randrange(len(items) + 1), item)
        self.ever.add(self._key("gitlab", item))

    def add_message(self) -> None:
        n = self._next()
        ts = f"{1_700_000_000 + n * 37}.{n:06d}"
        self.fakes.slack.add_message("C1", "general", ts, f"{WORD} message {n}")
        self.ever.add("slack:" + str(self.fakes.slack.messages[-1]["permalink"]))

    def keys(self) -> set[str]:
        """Every item the providers hold now."""
        mail = {f"gmail:{m['id']}" for m in self.fakes.gmail.messages}
        events = {f"calendar:{e['id']}" for c in self.fakes.google_calendar.calendars.values()
                  for e in c["_events"]}
        issues = {f"jira:{i['key']}" for items in self.fakes.jira.items.values() for i in items}
        slack = {"slack:" + str(m["permalink"]) for m in self.fakes.slack.messages}
        gitlab = {self._key("gitlab", i) for i in self.fakes.gitlab.items}
        pages = {self._key("confluence", i) for items in self.fakes.confluence.items.values()
                 for i in items}
        return mail | events | issues | slack | gitlab | pages

    def check_paged(self, emitted: Sequence[str], label: str, prefix: str = "") -> None:
        """The guarantee over one paging (keys in emission order), over the items whose key
        starts with `prefix`."""
        repeated = [key for key, n in Counter(emitted).items() if n > 1]
        assert not repeated, f"{label}: emitted twice: {repeated[:5]}"
        present = {key for key in self.initial - self.deleted if key.startswith(prefix)}
        missing = present - set(emitted)
        assert not missing, f"{label}: never emitted {sorted(missing)}"
        unknown = set(emitted) - self.ever
        assert not unknown, f"{label}: emitted what never existed: {unknown}"

    # ---- changes between pages ------------------------------------------------------------
    def _pools(self) -> list[tuple[str, list[dict[str, Any]]]]:
        calendars = self.fakes.google_calendar.calendars
        return [("gmail", self.fakes.gmail.messages),
                *(("calendar", calendars[c]["_events"]) for c in CALENDARS),
                *(("jira", self.fakes.jira.items[cloud]) for cloud, _, _ in SITES),
                ("gitlab", self.fakes.gitlab.items),
                *(("confluence", self.fakes.confluence.items[cloud]) for cloud, _, _ in SITES),
                ("slack", self.fakes.slack.messages)]

    @staticmethod
    def _key(kind: str, item: dict[str, Any]) -> str:
        if kind == "gmail" or kind == "calendar":
            return f"{kind}:{item['id']}"
        if kind == "jira":
            return f"jira:{item['key']}"
        if kind == "confluence":
            return f"confluence:{item['content']['id']}"
        if kind == "gitlab":
            if item["_scope"] in ("issues", "merge_requests"):
                return "gitlab:" + urlsplit(str(item["web_url"])).path
            return f"gitlab:/{PROJECTS[item['project_id']]}/-/blob/main/{item['path']}"
        return "slack:" + str(item["permalink"])

    def delete(self) -> None:
        pools = [(kind, pool) for kind, pool in self._pools() if pool]
        if not pools:
            return
        kind, pool = self.rng.choice(pools)
        self.deleted.add(self._key(kind, pool.pop(self.rng.randrange(len(pool)))))

    def delete_after_listing(self) -> None:
        """A Gmail message deleted between the list that holds it and its details' read: the
        deletion lands while a call reads the list, and the messages after it move up one
        place, the first of the next page onto the page just read."""
        if self.fakes.gmail.messages:
            message = self.rng.choice(self.fakes.gmail.messages)
            self.fakes.gmail.delete_after_next_list(message["id"])
            self.deleted.add(f"gmail:{message['id']}")

    def insert(self) -> None:
        self.rng.choice([self.add_mail, self.add_event, self.add_issue, self.add_gitlab,
                         self.add_page, self.add_message])()

    def move(self) -> None:
        """An item moves in its list: a mail's date, an event's start, an issue's update, a
        GitLab item's or a Confluence page's place (its relevance)."""
        choice = self.rng.randrange(5)
        items = (self.fakes.gitlab.items if choice == 3
                 else self.fakes.confluence.items[self.rng.choice(SITES)[0]])
        if choice >= 3 and items:
            item = items.pop(self.rng.randrange(len(items)))
            items.insert(self.rng.randrange(len(items) + 1), item)
            return
        if choice == 0 and self.fakes.gmail.messages:
            message = self.rng.choice(self.fakes.gmail.messages)
            message["internalDate"] = str(int(self._when().timestamp() * 1000))
        elif choice == 1:
            events = [e for c in CALENDARS
                      for e in self.fakes.google_calendar.calendars[c]["_events"]]
            if events:
                start = self._when()
                event = self.rng.choice(events)
                event["start"] = {"dateTime": _iso(start)}
                event["end"] = {"dateTime": _iso(start + timedelta(minutes=30))}
        else:
            issues = [i for cloud, _, _ in SITES for i in self.fakes.jira.items[cloud]]
            if issues:
                self.rng.choice(issues)["fields"]["updated"] = _jira_time(self._when())

    def fault(self) -> None:
        """Make one of the next provider requests fail, or one message's details read."""
        if self.rng.random() < 0.3 and self.fakes.gmail.messages:
            message = self.rng.choice(self.fakes.gmail.messages)
            status = self.rng.choice([429, 403, 500])
            self.fakes.gmail.fail_reads(message["id"], status, retry_after=0)
            return
        cloud = self.rng.choice(SITES)[0]
        calendar = self.rng.choice(CALENDARS)
        fake, path = self.rng.choice([
            (self.fakes.gmail, "/gmail/v1/users/me/messages"),
            (self.fakes.gmail, "/batch/gmail/v1"),
            (self.fakes.google_calendar, f"/calendar/v3/calendars/{calendar}/events"),
            (self.fakes.jira, f"/ex/jira/{cloud}/rest/api/3/search/jql"),
            (self.fakes.gitlab, f"/api/v4/projects/{self.rng.choice(list(PROJECTS))}/search"),
            (self.fakes.confluence, f"/ex/confluence/{cloud}/wiki/rest/api/search"),
            (self.fakes.slack, "/api/assistant.search.context"),
        ])
        call = self.rng.randrange(1, 4)
        kind = self.rng.randrange(5 if self.slow else 4)
        if kind == 4:
            fake.slow(self.slow, path=path, times=1).on_call = call
        elif kind == 0:
            fake.fail_call(path, call, 429, headers={"Retry-After": "0"})
        elif kind == 1:
            fake.fail_call(path, call, 500)
        elif kind == 2:
            fake.reset_connection(path=path, times=2)
        else:
            fake.close_kept_alive(path=path, times=1).on_call = call

    def expire(self) -> None:
        """Expire page tokens: one calendar's alone (a leg's), or a whole provider's."""
        choice = self.rng.randrange(4)
        if choice == 0:
            self.fakes.google_calendar.expire_calendar_tokens(self.rng.choice(CALENDARS))
        else:
            self.rng.choice([self.fakes.gmail, self.fakes.jira, self.fakes.confluence,
                             self.fakes.slack, self.fakes.google_calendar]).expire_page_tokens()

    def revoke(self) -> None:
        """The user revokes one provider's token; its accounts are reconnected 0-2 pages later."""
        self._revoke(PROVIDERS)

    def change(self) -> None:
        """A random handful of changes and faults."""
        actions: list[Callable[[], None]] = [
            self.delete, self.delete_after_listing, self.insert, self.move, self.fault,
            self.fault, self.expire, self.revoke,
        ]
        for _ in range(self.rng.randrange(5)):
            self.rng.choice(actions)()


def seeded_legs(fakes: FakeProviders, rng: random.Random, *, slow: float = 0.0) -> LegsCorpus:
    """Fresh fakes holding a random Gmail, Calendar (two calendars), Jira and Confluence (two
    sites each), GitLab (two projects) and Slack corpus; `slow` > 0 adds answers that late to
    the faults."""
    fakes.reset()
    for calendar in CALENDARS:
        fakes.google_calendar.add_calendar(calendar)
    for cloud, name, _ in SITES:
        fakes.jira.add_site(cloud, name)
        fakes.confluence.add_site(cloud, name)
    for project, path in PROJECTS.items():
        fakes.gitlab.add_project(project, path)
    corpus = LegsCorpus(fakes, rng, slow=slow)
    for make, low, high in ((corpus.add_mail, 0, 40), (corpus.add_event, 0, 40),
                            (corpus.add_issue, 0, 40), (corpus.add_gitlab, 0, 40),
                            (corpus.add_page, 0, 40),
                            (corpus.add_message, 0, 30)):
        for _ in range(rng.randrange(low, high)):
            make()
    corpus.initial = corpus.keys()
    return corpus
