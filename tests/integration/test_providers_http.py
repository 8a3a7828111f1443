"""Provider adapters through AccountSession over real HTTP against the fake provider servers."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from service.fakes.suite import FakeProviders
from service.workspace.http import AccountSession, HttpClient
from service.workspace.model import (
    Account,
    Credentials,
    Kind,
    ProviderError,
    ProviderId,
    ProviderPage,
    ProviderQuery,
    QueryState,
    TimeRange,
)
from service.workspace.providers import REGISTRY

GH = ProviderId.GITHUB


@asynccontextmanager
async def client(
    fakes: FakeProviders,
    provider: ProviderId,
    *,
    budget: int = 30,
    deadline_in: float | None = None,
    **options: Any,
) -> AsyncIterator[HttpClient]:
    """An HttpClient for one query against the provider's fake."""
    session = fakes.session(provider, **options)
    deadline = None
    if deadline_in is not None:
        deadline = asyncio.get_running_loop().time() + deadline_in
    try:
        yield session.for_query(budget=budget, deadline=deadline)
    finally:
        await session.aclose()


async def search(
    fakes: FakeProviders, provider: ProviderId, query: ProviderQuery, **options: Any
) -> ProviderPage:
    """Run the registered adapter once."""
    async with client(fakes, provider, **options) as http:
        return await REGISTRY[provider].search(http, query)


async def failure(
    fakes: FakeProviders, provider: ProviderId, query: ProviderQuery, **options: Any
) -> ProviderError:
    """Run the adapter and return the ProviderError it raised."""
    with pytest.raises(ProviderError) as caught:
        await search(fakes, provider, query, **options)
    assert fakes.of(provider).token not in str(caught.value)
    return caught.value


async def get_error(fakes: FakeProviders, **options: Any) -> ProviderError:
    """GET /user/repos on the GitHub fake and return the mapped error."""
    async with client(fakes, GH, **options) as http:
        with pytest.raises(ProviderError) as caught:
            await http.get_json("/user/repos")
    assert fakes.github.token not in caught.value.message
    return caught.value


# ---- the HTTP layer -------------------------------------------------------------------------


async def test_bearer_token_sent_and_json_returned(fakes: FakeProviders) -> None:
    fakes.github.add_repo("acme/api")
    async with client(fakes, GH) as http:
        data = await http.get_json("/user/repos", params={"per_page": 5})
        assert http.requests_made == 1
    assert [r["full_name"] for r in data] == ["acme/api"]
    assert fakes.github.log[0].headers["authorization"] == f"Bearer {fakes.github.token}"


async def test_basic_auth_for_atlassian_usernames(fakes: FakeProviders) -> None:
    fakes.jira.add_site("c1", "acme")
    fakes.jira.add_issue("c1", "ENG-1", "Deploy broke")
    page = await search(
        fakes, ProviderId.JIRA, ProviderQuery('text ~ "deploy"'), username="jane@example.com"
    )
    assert [d.id for d in page.documents] == ["ENG-1"]
    assert fakes.jira.log[0].headers["authorization"].startswith("Basic ")
    assert fakes.jira.requests["/rest/api/3/search/jql"] == 1  # no site discovery needed


@pytest.mark.parametrize(
    ("arm", "state", "needle"),
    [
        (lambda f: f.github.fail_status(503), QueryState.FAILED, "HTTP 503"),
        (lambda f: f.github.fail_status(500), QueryState.FAILED, "HTTP 500"),
        (lambda f: f.github.fail_status(404), QueryState.FAILED, "HTTP 404"),
        (lambda f: f.github.fail_status(422), QueryState.FAILED, "check native syntax/scope"),
        (lambda f: f.github.fail_status(403), QueryState.FAILED, "denied this request"),
        (lambda f: f.github.malformed(), QueryState.FAILED, "malformed JSON"),
        (lambda f: f.github.truncate(), QueryState.FAILED, "cut off"),
        (lambda f: f.github.reset_connection(), QueryState.FAILED, "could not reach"),
        (
            lambda f: f.github.fault(
                "status", status=302, headers={"Location": "https://evil.test/"}
            ),
            QueryState.FAILED,
            "redirects are not followed",
        ),
    ],
)
async def test_fault_knobs_map_to_states(
    fakes: FakeProviders, arm: Any, state: QueryState, needle: str
) -> None:
    arm(fakes)
    error = await get_error(fakes)
    assert error.state is state
    assert needle in error.message
    assert fakes.github.requests["/user/repos"] == 1  # never retried, never redirected


async def test_429_retry_after(fakes: FakeProviders) -> None:
    fakes.github.rate_limit(retry_after=30)
    error = await get_error(fakes)
    assert error.state is QueryState.RATE_LIMITED
    assert error.retry_after == 30.0


async def test_github_quota_exhausted_403(fakes: FakeProviders) -> None:
    fakes.github.exhaust_quota(reset_in=42)
    error = await get_error(fakes)
    assert error.state is QueryState.RATE_LIMITED
    assert error.retry_after is not None
    assert 39 <= error.retry_after <= 42


async def test_wrong_token_needs_reconnect(fakes: FakeProviders) -> None:
    account = fakes.account(GH)
    session = AccountSession(account, Credentials("wrong-token"), allow_insecure_http=True)
    try:
        with pytest.raises(ProviderError) as caught:
            await session.for_query(budget=3, deadline=None).get_json("/user/repos")
    finally:
        await session.aclose()
    assert caught.value.state is QueryState.NEEDS_RECONNECT
    assert "wrong-token" not in caught.value.message


async def test_slow_answer_times_out(fakes: FakeProviders) -> None:
    fakes.github.slow(1.0)
    error = await get_error(fakes, request_timeout=0.2)
    assert error.state is QueryState.TIMED_OUT


async def test_slow_drip_stops_at_the_deadline(fakes: FakeProviders) -> None:
    for i in range(5):
        fakes.github.add_repo(f"acme/repo-{i}")
    fakes.github.drip(0.05)
    started = asyncio.get_running_loop().time()
    error = await get_error(fakes, deadline_in=0.3)
    assert error.state is QueryState.TIMED_OUT
    assert asyncio.get_running_loop().time() - started < 1.0


async def test_passed_deadline_sends_nothing(fakes: FakeProviders) -> None:
    error = await get_error(fakes, deadline_in=-1.0)
    assert error.state is QueryState.TIMED_OUT
    assert not fakes.github.log


async def test_budget_is_enforced(fakes: FakeProviders) -> None:
    async with client(fakes, GH, budget=2) as http:
        await http.get_json("/user/repos")
        await http.get_json("/user/repos")
        with pytest.raises(ProviderError) as caught:
            await http.get_json("/user/repos")
        assert http.requests_made == 2
    assert caught.value.state is QueryState.FAILED
    assert caught.value.message == "request budget reached; narrow the query"
    assert fakes.github.requests["/user/repos"] == 2


async def test_response_size_is_capped(fakes: FakeProviders) -> None:
    for i in range(20):
        fakes.github.add_repo(f"acme/repo-{i}", description="x" * 200)
    error = await get_error(fakes, max_response_bytes=1024)
    assert error.state is QueryState.FAILED
    assert "too large" in error.message


async def test_credentials_never_leave_the_origin(fakes: FakeProviders) -> None:
    async with client(fakes, GH) as http:
        with pytest.raises(ProviderError) as caught:
            await http.get_json(f"{fakes.gitlab.base_url}/api/v4/projects")
        same = await http.get_json(f"{fakes.github.base_url}/user/repos")
    assert "another origin" in caught.value.message
    assert not fakes.gitlab.log
    assert same == []


async def test_plain_http_needs_explicit_permission(fakes: FakeProviders) -> None:
    with pytest.raises(ProviderError, match="https"):
        AccountSession(fakes.account(GH), Credentials("t"))


async def test_connection_refused_fails(fakes: FakeProviders) -> None:
    account = Account("a", "t", GH, "gone", "http://127.0.0.1:9")
    session = AccountSession(account, Credentials("t"), allow_insecure_http=True)
    try:
        with pytest.raises(ProviderError) as caught:
            await session.for_query(budget=1, deadline=None).get_json("/user/repos")
    finally:
        await session.aclose()
    assert caught.value.state is QueryState.FAILED


async def test_tokens_stay_out_of_logs(
    fakes: FakeProviders, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fakes.github.fail_status(401)
    await get_error(fakes)
    assert fakes.github.token not in caplog.text


async def test_cancellation_stops_provider_requests(fakes: FakeProviders) -> None:
    fakes.github.add_repo("acme/api")
    fakes.github.slow(0.3, path="/search")
    task = asyncio.create_task(search(fakes, GH, ProviderQuery("login")))
    await asyncio.sleep(0.15)
    assert fakes.github.requests["/user/repos"] == 1
    in_flight = len(fakes.github.log)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.4)
    assert len(fakes.github.log) == in_flight


# ---- GitHub ---------------------------------------------------------------------------------


def _seed_github(fakes: FakeProviders) -> None:
    fakes.github.add_repo("acme/api", pushed_at="2024-03-01T00:00:00Z")
    fakes.github.add_repo("acme/web", pushed_at="2024-02-01T00:00:00Z")
    fakes.github.add_repo("public/other", affiliated=False)
    fakes.github.add_issue("acme/api", 1, "Login fails", updated_at="2024-03-02T00:00:00Z")
    fakes.github.add_issue(
        "acme/web", 2, "Login page", pull=True, updated_at="2024-01-02T00:00:00Z"
    )
    fakes.github.add_issue("public/other", 3, "Login elsewhere")
    fakes.github.add_code("acme/api", "src/login.py", "def login(): pass")


async def test_github_kindless_is_scoped_to_affiliated_repos(fakes: FakeProviders) -> None:
    _seed_github(fakes)
    page = await search(fakes, GH, ProviderQuery("login"))
    assert {d.url for d in page.documents} == {
        "https://github.com/acme/api/issues/1",
        "https://github.com/acme/web/pull/2",
        "https://github.com/acme/api/blob/main/src/login.py",
    }
    assert (page.total, page.total_is_exact, page.partial) == (3, True, False)
    searches = [r.arg("q") for r in fakes.github.log if r.path.startswith("/search/")]
    assert all("repo:acme/api repo:acme/web" in q for q in searches)


async def test_github_kindless_or_skips_code_and_says_why(fakes: FakeProviders) -> None:
    _seed_github(fakes)
    page = await search(fakes, GH, ProviderQuery("login OR signin repo:acme/api"))
    assert [d.id for d in page.documents] == ["1"]
    assert "AND/OR/NOT" in page.skipped_legs["code"]
    assert "code search was skipped" in page.message
    assert fakes.github.requests["/search/code"] == 0
    assert fakes.github.requests["/user/repos"] == 0  # repo: given, no affiliation listing


async def test_github_code_search_answers_booleans_with_nothing_so_the_adapter_refuses(
    fakes: FakeProviders,
) -> None:
    _seed_github(fakes)
    async with client(fakes, GH) as http:  # the live API: 200 and no results, not 422
        alone = await http.get_json("/search/code", params={"q": "login repo:acme/api"})
        joined = await http.get_json("/search/code", params={"q": "login OR x repo:acme/api"})
    assert alone["total_count"] == 1
    assert (joined["total_count"], joined["items"]) == (0, [])
    error = await failure(fakes, GH, ProviderQuery("login OR x repo:acme/api", kind=Kind.CODE))
    assert error.state is QueryState.FAILED
    assert "separate calls" in error.message
    assert fakes.github.requests["/search/code"] == 2  # the adapter sent nothing


async def test_github_date_range_filters_issues(fakes: FakeProviders) -> None:
    _seed_github(fakes)
    window = TimeRange(datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 4, 1, tzinfo=UTC))
    page = await search(fakes, GH, ProviderQuery("login", time_range=window))
    assert [d.id for d in page.documents] == ["1"]
    assert "code" in page.skipped_legs


async def test_github_pages_never_repeat(fakes: FakeProviders) -> None:
    fakes.github.add_repo("acme/api")
    for number in range(1, 26):
        fakes.github.add_issue("acme/api", number, f"Crash {number}")
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(5):
        query = ProviderQuery(
            "crash repo:acme/api is:issue", kind=Kind.ISSUES, limit=10, cursor=cursor
        )
        page = await search(fakes, GH, query)
        seen += [d.id for d in page.documents]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen, key=int) == [str(n) for n in range(1, 26)]


async def test_github_failed_leg_is_partial(fakes: FakeProviders) -> None:
    _seed_github(fakes)
    fakes.github.rate_limit(retry_after=60, path="/search/code")
    page = await search(fakes, GH, ProviderQuery("login"))
    assert page.partial
    assert "code search failed" in page.message
    assert {d.kind for d in page.documents} == {"issue", "pull_request"}
    assert page.total is None


async def test_github_incomplete_results_are_partial(fakes: FakeProviders) -> None:
    _seed_github(fakes)
    fakes.github.incomplete = True
    page = await search(fakes, GH, ProviderQuery("login repo:acme/api", kind=Kind.ISSUES))
    assert page.partial
    assert not page.total_is_exact


async def test_github_without_repos_searches_nothing(fakes: FakeProviders) -> None:
    page = await search(fakes, GH, ProviderQuery("login"))
    assert page.documents == ()
    assert "no repositories" in page.message
    assert len(fakes.github.log) == 1


# ---- GitLab ---------------------------------------------------------------------------------


async def test_gitlab_searches_member_projects_per_kind(fakes: FakeProviders) -> None:
    fakes.gitlab.add_project(11, "acme/api", last_activity_at="2024-03-01T00:00:00Z")
    fakes.gitlab.add_project(12, "acme/web", last_activity_at="2024-02-01T00:00:00Z")
    fakes.gitlab.add_project(13, "other/secret", member=False)
    fakes.gitlab.add_issue(11, 1, "Connection timeout on login")
    fakes.gitlab.add_issue(12, 2, "Raise connection timeout", merge_request=True)
    fakes.gitlab.add_issue(13, 3, "Connection timeout hidden")
    fakes.gitlab.add_blob(11, "config/settings.py", "connection timeout = 30")
    page = await search(fakes, ProviderId.GITLAB, ProviderQuery("connection timeout"))
    assert {d.url for d in page.documents} == {
        "https://gitlab.example.com/acme/api/-/issues/1",
        "https://gitlab.example.com/acme/web/-/merge_requests/2",
        "https://gitlab.example.com/acme/api/-/blob/main/config/settings.py",
    }
    scopes = sorted(r.arg("scope") for r in fakes.gitlab.log if r.path.endswith("/search"))
    assert scopes == ["blobs", "blobs", "issues", "issues", "merge_requests", "merge_requests"]
    assert not page.partial


async def test_gitlab_caps_projects_and_pages_one_project(fakes: FakeProviders) -> None:
    for pid in range(1, 8):
        fakes.gitlab.add_project(pid, f"acme/p{pid}", last_activity_at=f"2024-01-0{pid}T00:00:00Z")
    for iid in range(1, 6):
        fakes.gitlab.add_issue(3, iid, f"Flaky test {iid}")
    page = await search(fakes, ProviderId.GITLAB, ProviderQuery("flaky", kind=Kind.ISSUES, limit=2))
    assert page.partial
    assert "6 most recently active" in page.message
    assert page.next_cursor is not None
    seen = [d.id for d in page.documents]
    query = ProviderQuery("flaky", kind=Kind.ISSUES, limit=2, project="acme/p3")
    page = await search(fakes, ProviderId.GITLAB, query)
    while True:
        seen += [d.id for d in page.documents]
        if page.next_cursor is None:
            break
        cursor_query = ProviderQuery(
            "flaky", kind=Kind.ISSUES, limit=2, project="acme/p3", cursor=page.next_cursor
        )
        page = await search(fakes, ProviderId.GITLAB, cursor_query)
    assert sorted(seen[2:]) == ["1", "2", "3", "4", "5"]


# ---- Slack ----------------------------------------------------------------------------------


async def test_slack_search_and_cursor(fakes: FakeProviders) -> None:
    for i in range(5):
        fakes.slack.add_message("C1", "eng", f"171234567{i}.000100", f"deploy freeze note {i}")
    fakes.slack.add_message("C2", "random", "1712345600.000100", "lunch")
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await search(
            fakes, ProviderId.SLACK, ProviderQuery("deploy freeze", limit=2, cursor=cursor)
        )
        seen += [d.id for d in page.documents]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 5
    body = json.loads(fakes.slack.log[0].body)
    assert body["query"] == "deploy freeze"
    assert body["limit"] == 2


async def test_slack_keyword_search_finds_nothing_for_or(fakes: FakeProviders) -> None:
    fakes.slack.add_message("C1", "eng", "1712345678.000100", "deploy freeze")
    page = await search(fakes, ProviderId.SLACK, ProviderQuery("deploy OR freeze"))
    assert page.documents == ()


@pytest.mark.parametrize(
    ("code", "state"),
    [
        ("ratelimited", QueryState.RATE_LIMITED),
        ("invalid_auth", QueryState.NEEDS_RECONNECT),
        ("missing_scope", QueryState.FAILED),
        ("token_revoked", QueryState.NEEDS_RECONNECT),
        ("not_authed", QueryState.NEEDS_RECONNECT),
        ("internal_error", QueryState.FAILED),
    ],
)
async def test_slack_ok_false_on_200(fakes: FakeProviders, code: str, state: QueryState) -> None:
    fakes.slack.answer({"ok": False, "error": code})
    error = await failure(fakes, ProviderId.SLACK, ProviderQuery("x"))
    assert error.state is state


async def test_slack_429_with_retry_after(fakes: FakeProviders) -> None:
    fakes.slack.fault(
        "status",
        status=429,
        headers={"Retry-After": "12"},
        body={"ok": False, "error": "ratelimited"},
    )
    error = await failure(fakes, ProviderId.SLACK, ProviderQuery("x"))
    assert (error.state, error.retry_after) == (QueryState.RATE_LIMITED, 12.0)


async def test_slack_wrong_token_needs_reconnect(fakes: FakeProviders) -> None:
    account = fakes.account(ProviderId.SLACK)
    session = AccountSession(account, Credentials("xoxp-wrong"), allow_insecure_http=True)
    try:
        with pytest.raises(ProviderError) as caught:
            await REGISTRY[ProviderId.SLACK].search(
                session.for_query(budget=2, deadline=None), ProviderQuery("x")
            )
    finally:
        await session.aclose()
    assert caught.value.state is QueryState.NEEDS_RECONNECT


# ---- Google Drive / Gmail / Calendar --------------------------------------------------------


async def test_drive_plain_words_native_q_and_paging(fakes: FakeProviders) -> None:
    for i in range(3):
        fakes.google_drive.add_file(
            f"f{i}", f"Roadmap {i}", "quarterly roadmap", modified=f"2024-03-0{i + 1}T00:00:00Z"
        )
    fakes.google_drive.add_file("t", "Old roadmap", "roadmap", trashed=True)
    fakes.google_drive.add_file("o", "Roadmap bob", "roadmap", owner="bob@example.com")
    first = await search(fakes, ProviderId.GOOGLE_DRIVE, ProviderQuery("roadmap", limit=3))
    assert first.next_cursor is not None
    second = await search(
        fakes, ProviderId.GOOGLE_DRIVE, ProviderQuery("roadmap", limit=3, cursor=first.next_cursor)
    )
    ids = [d.id for d in first.documents + second.documents]
    assert sorted(ids) == ["f0", "f1", "f2", "o"]
    native = "fullText contains 'roadmap' and 'bob@example.com' in owners"
    page = await search(fakes, ProviderId.GOOGLE_DRIVE, ProviderQuery(native))
    assert [d.id for d in page.documents] == ["o"]


async def test_drive_rejects_bare_words_in_native_q(fakes: FakeProviders) -> None:
    error = await failure(
        fakes, ProviderId.GOOGLE_DRIVE, ProviderQuery("roadmap and 'jane@example.com' in owners")
    )
    assert error.state is QueryState.FAILED
    assert "HTTP 400" in error.message


async def test_drive_incomplete_search_and_dates(fakes: FakeProviders) -> None:
    fakes.google_drive.add_file("a", "Plan", "plan", modified="2024-03-05T00:00:00Z")
    fakes.google_drive.add_file("b", "Plan", "plan", modified="2024-05-05T00:00:00Z")
    fakes.google_drive.incomplete = True
    window = TimeRange(datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 4, 1, tzinfo=UTC))
    page = await search(fakes, ProviderId.GOOGLE_DRIVE, ProviderQuery("plan", time_range=window))
    assert [d.id for d in page.documents] == ["a"]
    assert page.partial


async def test_gmail_lists_then_reads_metadata(fakes: FakeProviders) -> None:
    for i in range(4):
        fakes.gmail.add_message(
            f"m{i}", f"Budget {i}", "the budget's draft", sent=datetime(2024, 3, i + 1, tzinfo=UTC)
        )
    fakes.gmail.add_message("x", "Lunch", "pizza", sent=datetime(2024, 3, 1, tzinfo=UTC))
    page = await search(fakes, ProviderId.GMAIL, ProviderQuery("budget", limit=3))
    assert [d.title for d in page.documents] == ["Budget 3", "Budget 2", "Budget 1"]
    assert page.documents[0].content == "the budget's draft"
    assert (page.total, page.total_is_exact) == (4, False)
    assert fakes.gmail.requests["/gmail/v1/users/me/messages"] == 1
    rest = await search(
        fakes, ProviderId.GMAIL, ProviderQuery("budget", limit=3, cursor=page.next_cursor)
    )
    assert [d.id for d in rest.documents] == ["m0"]
    assert rest.next_cursor is None


async def test_gmail_one_unreadable_message_is_partial(fakes: FakeProviders) -> None:
    for i in range(3):
        fakes.gmail.add_message(
            f"m{i}", "Budget", "budget", sent=datetime(2024, 3, i + 1, tzinfo=UTC)
        )
    fakes.gmail.fail_status(500, path="/messages/m1")
    window = TimeRange(datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 3, 2, 12, tzinfo=UTC))
    page = await search(fakes, ProviderId.GMAIL, ProviderQuery("budget", time_range=window))
    assert [d.id for d in page.documents] == ["m0"]  # m2 is after the bounds
    assert page.partial
    assert "message m1 failed" in page.message


async def test_calendar_fans_out_drops_cancelled_and_dedupes(fakes: FakeProviders) -> None:
    cal = fakes.google_calendar
    cal.add_calendar("jane@example.com", time_zone="Europe/Berlin")
    cal.add_calendar("team#eng@group.calendar.google.com")
    cal.add_calendar("broken@example.com")
    for calendar_id in ("jane@example.com", "team#eng@group.calendar.google.com"):
        cal.add_event(
            calendar_id,
            "e1",
            "Design review",
            start="2024-03-05T09:00:00Z",
            end="2024-03-05T10:00:00Z",
            ical_uid="shared@google.com",
        )
    cal.add_event(
        "jane@example.com",
        "e2",
        "Design review (old)",
        start="2024-03-06T09:00:00Z",
        end="2024-03-06T10:00:00Z",
        status="cancelled",
    )
    cal.add_event(
        "jane@example.com",
        "e3",
        "Design offsite",
        start="2024-03-07",
        end="2024-03-08",
        all_day=True,
    )
    cal.fail_status(503, path="broken@example.com")
    window = TimeRange(datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 4, 1, tzinfo=UTC))
    page = await search(
        fakes, ProviderId.GOOGLE_CALENDAR, ProviderQuery("design", time_range=window)
    )
    assert [d.id for d in page.documents] == ["e1", "e3"]
    assert page.documents[1].event_start_at == datetime(2024, 3, 6, 23, tzinfo=UTC)
    assert page.partial
    assert "calendar broken@example.com failed" in page.message


async def test_calendar_events_at_the_ends_of_the_calendar(fakes: FakeProviders) -> None:
    cal = fakes.google_calendar
    cal.add_calendar("east", time_zone="Etc/GMT-14")  # UTC+14: its 0001-01-01 is year 0 in UTC
    cal.add_event("east", "first", "Epoch", start="0001-01-01", end="0001-01-02", all_day=True)
    cal.add_event("east", "last", "Epoch", start="9999-12-30", end="9999-12-31", all_day=True,
                  time_zone="Mars/Olympus_Mons")  # unknown: the calendar's zone applies
    with pytest.raises(ValueError, match="holds no event"):  # Google refuses it, so the fake
        cal.add_event("east", "bad", "Epoch", start="2026-02-30", end="2026-03-01", all_day=True)
    page = await search(fakes, ProviderId.GOOGLE_CALENDAR, ProviderQuery("epoch"))
    starts = {d.id: d.event_start_at for d in page.documents}
    assert starts == {"first": None, "last": datetime(9999, 12, 29, 10, tzinfo=UTC)}


async def test_calendar_project_pages_with_raw_token(fakes: FakeProviders) -> None:
    fakes.google_calendar.add_calendar("primary")
    for i in range(3):
        fakes.google_calendar.add_event(
            "primary",
            f"e{i}",
            "Standup",
            start=f"2024-03-0{i + 1}T09:00:00Z",
            end=f"2024-03-0{i + 1}T09:15:00Z",
        )
    query = ProviderQuery("standup", project="primary", limit=2)
    first = await search(fakes, ProviderId.GOOGLE_CALENDAR, query)
    assert first.next_cursor is not None
    assert not first.next_cursor.startswith("{")
    second = await search(
        fakes,
        ProviderId.GOOGLE_CALENDAR,
        ProviderQuery("standup", project="primary", limit=2, cursor=first.next_cursor),
    )
    assert [d.id for d in first.documents + second.documents] == ["e0", "e1", "e2"]
    assert fakes.google_calendar.requests["/calendar/v3/users/me/calendarList"] == 0


# ---- Jira / Confluence ----------------------------------------------------------------------


async def test_jira_sites_dates_and_paging(fakes: FakeProviders) -> None:
    fakes.jira.add_site("c1", "acme")
    fakes.jira.add_site("c2", "acme-eu")
    for i in range(3):
        fakes.jira.add_issue(
            "c1", f"ENG-{i}", f"Deploy failure {i}", updated=f"2024-03-0{i + 1}T10:00:00.000+0000"
        )
    fakes.jira.add_issue("c2", "OPS-1", "Deploy freeze", updated="2024-03-02T10:00:00.000+0000")
    fakes.jira.add_issue("c2", "OPS-2", "Deploy old", updated="2023-01-02T10:00:00.000+0000")
    window = TimeRange(datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 4, 1, tzinfo=UTC))
    query = ProviderQuery('text ~ "deploy" ORDER BY updated DESC', time_range=window, limit=2)
    page = await search(fakes, ProviderId.JIRA, query)
    assert [d.id for d in page.documents] == ["ENG-2", "OPS-1", "ENG-1"]
    assert page.documents[0].url == "https://acme.atlassian.net/browse/ENG-2"
    assert page.next_cursor is not None
    assert json.loads(page.next_cursor).keys() == {"c1"}
    rest = await search(
        fakes,
        ProviderId.JIRA,
        ProviderQuery(query.text, time_range=window, limit=2, cursor=page.next_cursor),
    )
    assert [d.id for d in rest.documents] == ["ENG-0"]
    assert rest.next_cursor is None
    assert fakes.jira.requests["/ex/jira/c2/rest/api/3/search/jql"] == 1


async def test_jira_rejects_order_by_only(fakes: FakeProviders) -> None:
    fakes.jira.add_site("c1", "acme")
    error = await failure(fakes, ProviderId.JIRA, ProviderQuery("ORDER BY updated DESC"))
    assert error.state is QueryState.FAILED
    assert "check native syntax" in error.message


async def test_jira_unknown_project_site_fails(fakes: FakeProviders) -> None:
    fakes.jira.add_site("c1", "acme")
    error = await failure(fakes, ProviderId.JIRA, ProviderQuery("project = X", project="nope"))
    assert "cloud id" in error.message


async def test_confluence_cursor_from_next_link(fakes: FakeProviders) -> None:
    fakes.confluence.add_site("w1", "acme")
    for i in range(3):
        fakes.confluence.add_content("w1", f"p{i}", f"Roadmap {i}", "the roadmap for the year")
    fakes.confluence.add_content("w1", "a1", "roadmap.pdf", "roadmap", kind="attachment")
    query = ProviderQuery('type IN (page, blogpost) AND text ~ "roadmap"', project="w1", limit=2)
    first = await search(fakes, ProviderId.CONFLUENCE, query)
    assert first.next_cursor is not None
    second = await search(
        fakes,
        ProviderId.CONFLUENCE,
        ProviderQuery(query.text, project="w1", limit=2, cursor=first.next_cursor),
    )
    assert [d.id for d in first.documents + second.documents] == ["p0", "p1", "p2"]
    assert second.documents[0].url == "https://acme.atlassian.net/wiki/spaces/ENG/pages/p2"
    assert second.documents[0].content.startswith("the roadmap")
    mixed = await search(fakes, ProviderId.CONFLUENCE, ProviderQuery('text ~ "roadmap"', limit=10))
    assert "1 attachment" in mixed.message


async def test_confluence_rejects_leading_negation(fakes: FakeProviders) -> None:
    fakes.confluence.add_site("w1", "acme")
    error = await failure(
        fakes, ProviderId.CONFLUENCE, ProviderQuery('NOT space = ENG AND text ~ "x"')
    )
    assert "HTTP 400" in error.message


async def test_atlassian_site_list_is_shared_by_a_session(fakes: FakeProviders) -> None:
    fakes.confluence.add_site("w1", "acme")
    session = fakes.session(ProviderId.CONFLUENCE)
    try:
        for text in ('text ~ "a"', 'text ~ "b"'):
            await REGISTRY[ProviderId.CONFLUENCE].search(
                session.for_query(budget=5, deadline=None), ProviderQuery(text)
            )
    finally:
        await session.aclose()
    assert fakes.confluence.requests["/oauth/token/accessible-resources"] == 1


async def test_github_code_batches_fit_the_fakes_byte_limit(fakes: FakeProviders) -> None:
    for i in range(60):
        fakes.github.add_repo(f"some-organisation/a-long-repository-name-{i:02d}")
        fakes.github.add_code(
            f"some-organisation/a-long-repository-name-{i:02d}", "main.py", "def handler(): pass"
        )
    page = await search(fakes, GH, ProviderQuery("handler", kind=Kind.CODE, limit=100))
    assert len(page.documents) == 60
    assert fakes.github.requests["/search/code"] == 4
    assert not page.partial


async def test_github_code_q_over_1000_bytes_is_rejected(fakes: FakeProviders) -> None:
    repos = " ".join(f"repo:acme/repository-with-a-long-name-{i:03d}" for i in range(30))
    error = await failure(fakes, GH, ProviderQuery(f"handler {repos}", kind=Kind.CODE))
    assert "HTTP 422" in error.message
