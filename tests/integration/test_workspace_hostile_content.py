"""Provider content the real world sends, through the real server and channel: text cut inside
an emoji (lone surrogate escapes), NULs and terminal escapes, bidi and zero-width marks,
combining and astral characters, markup and character references, line separators, very long
fields; and dates at the ends of the calendar, with nanoseconds, without a colon in the offset,
or not dates at all (GitHub, GitLab and Drive, whose fakes pass them through); Gmail messages
dated 0, before 1970 or past year 9999 (imported mail); Calendar events all day at the ends of
the calendar in zones far from UTC (their midnight is outside the years Python counts), with
time zones the service does not know, and offsets of 45 minutes. Whatever the items of the
eight providers hold, a search answers OK with their results: never INTERNAL, never a lost
call."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import serving
from tests.support.reliability.world import PROVIDERS, connect_all, queries_for

pytest_plugins = ["tests.fakes.fixtures"]

WORD = "alpha"
PIECES = (
    "\ud83d", "\udc00", "\ud83d\ude00", "\ud83d\ud83d",  # lone, low, paired, doubled
    "\x00", "\x07\x1b[31m", "\x7f\x85", "\u202e\u2066", "\u200b\u200d\ufeff", "e\u0301",
    "\U0001f9d1\u200d\U0001f4bb", "<b>&amp;</b> &#xd83d; &#0;", "\r\n\t", "\\u0000 \\ud83d",
    "\"'`", "\ufffe\uffff", "\u2028\u2029", "\U0010ffff", "\u0600\u06dd",
)
SEEDS = range(8)


def _hostile(rng: random.Random) -> str:
    parts = [rng.choice(PIECES) for _ in range(rng.randint(1, 6))]
    if rng.random() < 0.2:
        parts.append("x" * rng.choice((5_000, 40_000)))
    parts.insert(rng.randint(0, len(parts)), f" {WORD} ")
    return "".join(parts)


# Gmail `internalDate`s and the update time each must read as (None: no time is sent).
MAIL_DATES = {
    "0": "1970-01-01T00:00:00Z", "-1": "1969-12-31T23:59:59.999Z",
    "-62135596800000": "0001-01-01T00:00:00Z", "253402300799999": "9999-12-31T23:59:59.999Z",
    "-62135596800001": None, "99999999999999999999": None,
}


def _seed(fakes: FakeProviders, rng: random.Random, items: int) -> dict[str, str | None]:
    """Items of every provider; returns each Gmail message's expected update time by id."""
    mail: dict[str, str | None] = {}
    now = datetime(2026, 6, 1, tzinfo=UTC)
    fakes.github.add_repo("acme/app", description=WORD)
    fakes.gitlab.add_project(1, "acme/app")
    fakes.google_calendar.add_calendar("primary")
    fakes.google_calendar.add_calendar("east", time_zone="Etc/GMT-14")  # UTC+14
    fakes.google_calendar.add_calendar("west", time_zone="Etc/GMT+12")  # UTC-12
    fakes.jira.add_site("cloud-1", "acme")
    fakes.confluence.add_site("cloud-1", "acme")
    for n in range(1, items + 1):
        when = now - timedelta(hours=n)
        odd = rng.choice([when.strftime("%Y-%m-%dT%H:%M:%SZ"), "0001-01-01T00:00:00Z",
                          "9999-12-31T23:59:59Z", "2026-06-01T10:00:00.123456789Z",
                          "2026-06-01T10:00:00.000+0000", "9999-12-31T23:59:59-01:00",
                          "0001-01-01T00:00:00+01:00", "not a date", "", "2026-13-45T99:99:99Z",
                          "1969-12-31T23:59:59.999Z", "2026-06-01"])
        title, text = _hostile(rng), _hostile(rng)
        fakes.github.add_issue("acme/app", n, title, text, updated_at=odd)
        fakes.gitlab.add_issue(1, n, title, text, updated_at=odd)
        fakes.slack.add_message("C1", "general", f"{1_700_000_000 + n}.000100", text)
        fakes.google_drive.add_file(f"f{n}", title, text, modified=odd)
        internal = rng.choice(list(MAIL_DATES))
        mail[f"m{n}"] = MAIL_DATES[internal]
        fakes.gmail.add_message(f"m{n}", title, text, sent=when, internal_date=internal)
        _event(fakes, rng, f"e{n}", text, when)
        fakes.jira.add_issue("cloud-1", f"ACME-{n}", title, text)
        fakes.confluence.add_content("cloud-1", f"c{n}", title, text)
    return mail


def _event(fakes: FakeProviders, rng: random.Random, event_id: str, text: str,
           when: datetime) -> None:
    """One event in a random calendar: timed as usual, with an odd offset or fraction, or all
    day at an end of the calendar; sometimes with a time zone no database has."""
    calendar = rng.choice(["primary", "east", "west"])
    zone = rng.choice(["", "", "Mars/Olympus_Mons", "America/Argentina/ComodRivadavia", "UTC"])
    iso = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    shape = rng.randrange(4)
    if shape == 0:
        start, end, all_day = iso, (when + timedelta(minutes=30)).strftime(
            "%Y-%m-%dT%H:%M:%SZ"), False
    elif shape == 1:
        start, end, all_day = "2026-06-01T10:00:00.123456+05:45", "2026-06-01T11:00:00+05:45", False
    elif shape == 2:
        start, end, all_day = "0001-01-01", "0001-01-02", True
    else:
        start, end, all_day = "9999-12-30", "9999-12-31", True
    fakes.google_calendar.add_event(calendar, event_id, text, start=start, end=end,
                                    all_day=all_day, updated=iso, time_zone=zone)


@pytest.mark.parametrize("seed", SEEDS)
async def test_hostile_provider_text_is_served_by_every_provider(
    fakes: FakeProviders, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    items = 4
    mail = _seed(fakes, rng, items)
    async with serving(fakes, tmp_path) as client:
        accounts = await connect_all(client.accounts, fakes, client.metadata)
        queries = [q for name in PROVIDERS for q in queries_for(name, (WORD,))]
        statuses, pages = await client.run(
            pb.SearchWorkspaceRequest(queries=queries, top_k=50), seconds=30)
    assert {s.state for s in statuses} == {pb.QUERY_STATE_OK}, [
        (s.provider, s.message) for s in statuses if s.state != pb.QUERY_STATE_OK]
    (page,) = pages
    found = {c.account_id for r in page.results for c in r.contributions}
    assert found == set(accounts.values())  # every provider's items came through
    for result in page.results:  # what was cut inside an emoji reads as U+FFFD
        for text in (result.title, result.snippet):
            assert not any("\ud800" <= ch <= "\udfff" for ch in text)
    dated = {r.url.rsplit("/", 1)[-1]: r.update_time.ToJsonString() if r.HasField(
        "update_time") else None for r in page.results if r.provider == cpb.PROVIDER_GMAIL}
    assert dated == mail  # to the millisecond, at both ends of the calendar
