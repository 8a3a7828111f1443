"""Provider error reasons read from the body, through a real gRPC server and channel.

Each fake answers an error exactly as the live API documents it (service/fakes/errors.py);
the streamed QueryStatus must carry the right state, message and retry_after, quota and scope
errors must leave the account connected (its card kept), and a provider's own parse message
must reach the status without the account's token (issue 14 items 3, 6 and 7).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes import errors
from service.fakes.base import FakeProvider
from service.fakes.suite import FakeProviders
from service.workspace.http import BUDGET_MESSAGE
from service.workspace.model import ProviderError, ProviderId, QueryState
from tests.integration.test_workspace_grpc import Client, serving

DRIVE = cpb.PROVIDER_GOOGLE_DRIVE
GMAIL = cpb.PROVIDER_GMAIL
CALENDAR = cpb.PROVIDER_GOOGLE_CALENDAR
GITHUB = cpb.PROVIDER_GITHUB
GITLAB = cpb.PROVIDER_GITLAB
SLACK = cpb.PROVIDER_SLACK
JIRA = cpb.PROVIDER_JIRA
CONFLUENCE = cpb.PROVIDER_CONFLUENCE
DRIVE_SCOPE = "https://www.googleapis.com/auth/drive.readonly"
TEXT = {
    DRIVE: "fullText contains 'roadmap'",
    GMAIL: "budget",
    CALENDAR: "standup",
    GITHUB: "bug",
    GITLAB: "bug",
    SLACK: "deploy",
    JIRA: 'text ~ "deploy"',
    CONFLUENCE: 'text ~ "roadmap"',
}


def fake_of(fakes: FakeProviders, provider: cpb.Provider) -> FakeProvider:
    """The fake serving a proto provider."""
    name = cpb.Provider.Name(provider).removeprefix("PROVIDER_").lower()
    return fakes.of(ProviderId(name))


async def connect(client: Client, fakes: FakeProviders, provider: cpb.Provider) -> str:
    """Connect an account of `provider` to its fake (Atlassian: with one site)."""
    fake = fake_of(fakes, provider)
    if provider in (JIRA, CONFLUENCE):
        fake.add_site("c1", "acme")  # type: ignore[attr-defined]
    request = apb.ConnectAccountRequest(
        provider=provider, display_name="work", credentials=apb.Credentials(token=fake.token)
    )
    reply = await client.accounts.ConnectAccount(request, metadata=client.metadata)
    return reply.account.account_id


async def search_one(client: Client, provider: cpb.Provider) -> pb.QueryStatus:
    """Run one native query of `provider`; its last (current) status."""
    query = pb.NativeQuery(provider=provider, text=TEXT[provider])
    if provider in (GITHUB, GITLAB):
        query.kind = pb.QUERY_KIND_ISSUES
    statuses, _ = await client.run(pb.SearchWorkspaceRequest(queries=[query]))
    return [s for s in statuses if s.query_index == 0][-1]


async def assert_still_connected(client: Client, account_id: str, provider: cpb.Provider) -> None:
    """ListAccounts shows the account connected, with its card, and the guidance card."""
    listed = await client.search.ListAccounts(pb.ListAccountsRequest(), metadata=client.metadata)
    (account,) = [a for a in listed.accounts if a.account_id == account_id]
    assert account.state == pb.ACCOUNT_STATE_CONNECTED
    assert account.card.provider == provider
    assert provider in [card.provider for card in listed.guidance.cards]


def seconds(status: pb.QueryStatus) -> float | None:
    """retry_after in seconds; None when unset."""
    if not status.HasField("retry_after"):
        return None
    return status.retry_after.seconds + status.retry_after.nanos / 1e9


Arm = Callable[[FakeProvider], object]

GOOGLE_QUOTAS: list[tuple[str, cpb.Provider, Arm, float]] = [
    ("drive-user-rate", DRIVE, lambda f: errors.google_error(f, "userRateLimitExceeded"), 60.0),
    ("drive-rate-429", DRIVE,
     lambda f: errors.google_error(f, "rateLimitExceeded", status=429), 60.0),
    ("drive-daily", DRIVE, lambda f: errors.google_error(f, "dailyLimitExceeded"), 3600.0),
    ("gmail-error-info-403", GMAIL, lambda f: errors.google_quota_details(f, status=403), 60.0),
    ("gmail-user-rate", GMAIL, lambda f: errors.google_error(f, "userRateLimitExceeded"), 60.0),
    ("calendar-quota", CALENDAR, lambda f: errors.google_error(f, "quotaExceeded"), 60.0),
    ("calendar-resource-exhausted", CALENDAR, lambda f: errors.google_quota_details(f), 60.0),
]


@pytest.mark.parametrize(
    ("provider", "arm", "wait"), [c[1:] for c in GOOGLE_QUOTAS], ids=[c[0] for c in GOOGLE_QUOTAS]
)
async def test_google_quota_errors_are_rate_limited_and_keep_the_account(
    fakes: FakeProviders, tmp_path: Path, provider: cpb.Provider, arm: Arm, wait: float
) -> None:
    async with serving(fakes, tmp_path) as client:
        account = await connect(client, fakes, provider)
        arm(fake_of(fakes, provider))
        status = await search_one(client, provider)
        assert status.state == pb.QUERY_STATE_RATE_LIMITED
        assert seconds(status) == wait
        assert f"retry in {wait:.0f} s" in status.message
        await assert_still_connected(client, account, provider)


async def test_google_missing_scope_names_it_and_keeps_the_account(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        account = await connect(client, fakes, DRIVE)
        errors.google_insufficient_scope(fakes.google_drive, DRIVE_SCOPE)
        status = await search_one(client, DRIVE)
        assert status.state == pb.QUERY_STATE_FAILED
        assert f"lacks the scope {DRIVE_SCOPE}" in status.message
        await assert_still_connected(client, account, DRIVE)


@pytest.mark.parametrize(
    ("reason", "said"),
    [("domainPolicy", "The domain administrators have disabled Drive apps."),
     ("forbidden", "Forbidden")],
)
async def test_google_other_403_fails_with_the_provider_message(
    fakes: FakeProviders, tmp_path: Path, reason: str, said: str
) -> None:
    async with serving(fakes, tmp_path) as client:
        account = await connect(client, fakes, DRIVE)
        errors.google_error(fakes.google_drive, reason)
        status = await search_one(client, DRIVE)
        assert status.state == pb.QUERY_STATE_FAILED
        # The status joins sentences, so it may add a full stop.
        assert status.message.rstrip(".") == f"provider denied this request: {said} (HTTP 403)"
        await assert_still_connected(client, account, DRIVE)


async def test_drive_syntax_error_message_reaches_the_status_without_the_token(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    drive = fakes.google_drive
    async with serving(fakes, tmp_path) as client:
        await connect(client, fakes, DRIVE)
        # A provider that echoes the credential (or a keyed URL) must not leak it.
        errors.google_invalid_query(
            drive, f"Invalid Value {drive.token} at https://www.googleapis.com/x?key=AIzaKey123"
        )
        status = await search_one(client, DRIVE)
        assert status.state == pb.QUERY_STATE_FAILED
        assert status.message.startswith("provider rejected this query: Invalid Value [redacted]")
        assert status.message.rstrip(".").endswith("; check native syntax/scope (HTTP 400)")
        assert drive.token not in status.message
        assert "AIzaKey123" not in status.message


async def test_github_secondary_rate_limit_is_rate_limited_with_the_documented_wait(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        account = await connect(client, fakes, GITHUB)
        errors.github_secondary_limit(fakes.github)
        status = await search_one(client, GITHUB)
        assert status.state == pb.QUERY_STATE_RATE_LIMITED
        assert seconds(status) == 60.0
        assert "secondary rate limit" in status.message
        await assert_still_connected(client, account, GITHUB)


async def test_github_missing_scope_is_named(fakes: FakeProviders, tmp_path: Path) -> None:
    async with serving(fakes, tmp_path) as client:
        account = await connect(client, fakes, GITHUB)
        errors.github_missing_scope(fakes.github, accepted="repo", granted="read:user")
        status = await search_one(client, GITHUB)
        assert status.state == pb.QUERY_STATE_FAILED
        assert "lacks the scope repo" in status.message
        await assert_still_connected(client, account, GITHUB)


async def test_slack_ratelimited_on_http_200_carries_retry_after(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        account = await connect(client, fakes, SLACK)
        errors.slack_ratelimited(fakes.slack, retry_after=7)
        status = await search_one(client, SLACK)
        assert status.state == pb.QUERY_STATE_RATE_LIMITED
        assert seconds(status) == 7.0
        await assert_still_connected(client, account, SLACK)


async def test_slack_missing_scope_names_it_and_keeps_the_account(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        account = await connect(client, fakes, SLACK)
        errors.slack_missing_scope(fakes.slack, needed="search:read.public", provided="identify")
        status = await search_one(client, SLACK)
        assert status.state == pb.QUERY_STATE_FAILED
        assert "lacks the scope search:read.public (granted: identify)" in status.message
        await assert_still_connected(client, account, SLACK)


async def test_atlassian_scope_mismatch_is_a_permission_failure(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        account = await connect(client, fakes, JIRA)
        errors.atlassian_scope_mismatch(fakes.jira, path="/search/jql")
        status = await search_one(client, JIRA)
        assert status.state == pb.QUERY_STATE_FAILED
        assert "lacks the scope read:jira-work" in status.message
        await assert_still_connected(client, account, JIRA)


@pytest.mark.parametrize(
    ("provider", "arm", "said"),
    [
        (JIRA, lambda f: errors.jira_jql_error(f),
         "Error in the JQL Query: Expecting either 'OR' or 'AND' but got 'deploy'. "
         "(line 1, character 14)"),
        (CONFLUENCE, lambda f: errors.confluence_cql_error(f, 'text ~ "roadmap" ORDER'),
         'Could not parse cql : text ~ "roadmap" ORDER'),
    ],
    ids=["jql", "cql"],
)
async def test_atlassian_syntax_errors_reach_the_status(
    fakes: FakeProviders, tmp_path: Path, provider: cpb.Provider, arm: Arm, said: str
) -> None:
    fake = fake_of(fakes, provider)
    async with serving(fakes, tmp_path) as client:
        await connect(client, fakes, provider)
        arm(fake)
        status = await search_one(client, provider)
        assert status.state == pb.QUERY_STATE_FAILED
        assert said in status.message
        assert "check native syntax/scope (HTTP 400)" in status.message
        assert fake.token not in status.message


async def test_gitlab_insufficient_scope_is_named(fakes: FakeProviders, tmp_path: Path) -> None:
    async with serving(fakes, tmp_path) as client:
        account = await connect(client, fakes, GITLAB)
        errors.gitlab_insufficient_scope(fakes.gitlab, "read_api")
        status = await search_one(client, GITLAB)
        assert status.state == pb.QUERY_STATE_FAILED
        assert "lacks the scope read_api" in status.message
        await assert_still_connected(client, account, GITLAB)


# ---- retryable on the wire (AccountSession over real HTTP) ----------------------------------

TRANSPORT: list[tuple[str, Arm, bool]] = [
    ("http-500", lambda f: f.fail_status(500), True),
    ("http-503", lambda f: f.fail_status(503), True),
    ("malformed", lambda f: f.malformed(), True),
    ("cut-off", lambda f: f.truncate(), True),
    ("reset", lambda f: f.reset_connection(), True),
    ("http-404", lambda f: f.fail_status(404), False),
    ("http-422", lambda f: f.fail_status(422), False),
    ("redirect", lambda f: f.fault("status", status=302, headers={"Location": "/x"}), False),
]


@pytest.mark.parametrize(
    ("arm", "retryable"), [t[1:] for t in TRANSPORT], ids=[t[0] for t in TRANSPORT]
)
async def test_transient_failures_are_retryable_and_final_ones_are_not(
    fakes: FakeProviders, arm: Arm, retryable: bool
) -> None:
    arm(fakes.github)
    session = fakes.session(ProviderId.GITHUB)
    try:
        with pytest.raises(ProviderError) as caught:
            await session.for_query(budget=2, deadline=None).get_json("/user/repos")
    finally:
        await session.aclose()
    assert caught.value.state is QueryState.FAILED
    assert caught.value.retryable is retryable


async def test_the_budget_message_is_retryable(fakes: FakeProviders) -> None:
    session = fakes.session(ProviderId.GITHUB)
    try:
        with pytest.raises(ProviderError) as caught:
            await session.for_query(budget=0, deadline=None).get_json("/user/repos")
    finally:
        await session.aclose()
    assert (caught.value.message, caught.value.retryable) == (BUDGET_MESSAGE, True)
