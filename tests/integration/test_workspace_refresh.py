"""Access-token refresh through a real gRPC server and channel; OAuth servers faked."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf import timestamp_pb2

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.oauth import Grant
from service.fakes.suite import FakeProviders
from service.metrics import Metrics
from service.workspace.model import ProviderId
from tests.integration.test_workspace_grpc import Client
from tests.integration.test_workspace_grpc import serving as grpc_serving

pytest_plugins = ["tests.fakes.fixtures"]

DRIVE = cpb.PROVIDER_GOOGLE_DRIVE
SLACK = cpb.PROVIDER_SLACK
DRIVE_QUERY = pb.NativeQuery(provider=DRIVE, text="name contains 'plan'")
SLACK_QUERY = pb.NativeQuery(provider=SLACK, text="plan")


def serving(
    fakes: FakeProviders, data_dir: Path, metrics: Metrics
) -> AbstractAsyncContextManager[Client]:
    """The service's servicers with OAuth clients pointing at the fake token endpoints."""
    return grpc_serving(fakes, data_dir, env=fakes.oauth_settings(),
                        on_refresh=metrics.token_refresh)


async def connect(
    client: Client, provider: cpb.Provider, grant: Grant, *, expires: datetime | None = None
) -> str:
    """Connect an account with an access token, its refresh token and (optionally) expiry."""
    credentials = apb.Credentials(token=grant.access_token, refresh_token=grant.refresh_token)
    if expires is not None:
        stamp = timestamp_pb2.Timestamp()
        stamp.FromDatetime(expires)
        credentials.expire_time.CopyFrom(stamp)
    request = apb.ConnectAccountRequest(
        provider=provider, display_name="work", credentials=credentials
    )
    reply = await client.accounts.ConnectAccount(request, metadata=client.metadata)
    return reply.account.account_id


async def states(client: Client) -> dict[str, int]:
    """Account id -> AccountState as listed."""
    listed = await client.search.ListAccounts(pb.ListAccountsRequest(), metadata=client.metadata)
    return {a.account_id: a.state for a in listed.accounts}


def refreshes(metrics: Metrics, provider: str, outcome: str) -> float:
    """The refresh counter's value."""
    value = metrics.registry.get_sample_value(
        "search_oauth_token_refreshes_total", {"provider": provider, "outcome": outcome}
    )
    return value or 0.0


def assert_no_secrets(texts: list[str], *secrets: str) -> None:
    """None of the secrets appears in any text."""
    for text in texts:
        for secret in secrets:
            assert secret not in text


async def test_drive_token_expiring_between_searches_is_refreshed_once(
    fakes: FakeProviders, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    issuer = fakes.issuer(ProviderId.GOOGLE_DRIVE)
    grant = issuer.grant()
    fakes.google_drive.add_file("f1", "plan.doc")
    metrics = Metrics()
    async with serving(fakes, tmp_path, metrics) as client:
        account = await connect(client, DRIVE, grant, expires=grant.expires_at)
        first, _ = await client.run(pb.SearchWorkspaceRequest(queries=[DRIVE_QUERY]))
        assert [s.state for s in first] == [pb.QUERY_STATE_OK]
        assert issuer.refreshes == 0
        issuer.expire_all()  # the provider ends the token early (its clock, a policy)
        second, pages = await client.run(pb.SearchWorkspaceRequest(queries=[DRIVE_QUERY]))
        assert [s.state for s in second] == [pb.QUERY_STATE_OK]
        assert [r.title for r in pages[0].results] == ["plan.doc"]
        assert issuer.refreshes == 1
        assert (await states(client))[account] == pb.ACCOUNT_STATE_CONNECTED
        third, _ = await client.run(pb.SearchWorkspaceRequest(queries=[DRIVE_QUERY]))
        assert [s.state for s in third] == [pb.QUERY_STATE_OK]
        assert issuer.refreshes == 1  # the refreshed token was stored and is used again
    assert refreshes(metrics, "google_drive", "ok") == 1
    messages = [s.message for s in [*first, *second, *third]]
    assert_no_secrets([caplog.text, *messages], grant.access_token, grant.refresh_token,
                      issuer.client_secret)


async def test_token_due_is_refreshed_before_the_provider_request(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    issuer = fakes.issuer(ProviderId.GOOGLE_DRIVE)
    grant = issuer.grant()
    soon = datetime.now(UTC) + timedelta(seconds=30)  # within the refresh margin
    async with serving(fakes, tmp_path, Metrics()) as client:
        await connect(client, DRIVE, grant, expires=soon)
        statuses, _ = await client.run(pb.SearchWorkspaceRequest(queries=[DRIVE_QUERY]))
    assert [s.state for s in statuses] == [pb.QUERY_STATE_OK]
    assert issuer.refreshes == 1
    sent = [r.headers.get("authorization") for r in fakes.google_drive.log]
    assert f"Bearer {grant.access_token}" not in sent  # refreshed first, never refused


@pytest.mark.parametrize("provider", [SLACK, DRIVE])
async def test_twenty_concurrent_queries_cause_one_refresh(
    fakes: FakeProviders, tmp_path: Path, provider: cpb.Provider
) -> None:
    provider_id = ProviderId.SLACK if provider == SLACK else ProviderId.GOOGLE_DRIVE
    query = SLACK_QUERY if provider == SLACK else DRIVE_QUERY
    issuer = fakes.issuer(provider_id)
    grant = issuer.grant()
    metrics = Metrics()
    async with serving(fakes, tmp_path, metrics) as client:
        account = await connect(client, provider, grant)  # expiry unknown: refused, refreshed
        issuer.expire_all()
        runs = await asyncio.gather(*(
            client.run(pb.SearchWorkspaceRequest(queries=[query])) for _ in range(20)
        ))
        assert [[s.state for s in statuses] for statuses, _ in runs] == (
            [[pb.QUERY_STATE_OK]] * 20
        )
        assert issuer.refreshes == 1  # Slack's refresh token is single-use: one spend only
        assert (await states(client))[account] == pb.ACCOUNT_STATE_CONNECTED
    assert refreshes(metrics, provider_id.value, "ok") == 1


@pytest.mark.parametrize(
    "query",
    [
        SLACK_QUERY,  # single-use refresh tokens
        pb.NativeQuery(provider=cpb.PROVIDER_GITHUB, text="bug", kind=pb.QUERY_KIND_ISSUES),
    ],
)
async def test_a_restart_uses_the_rotated_refresh_token(
    fakes: FakeProviders, tmp_path: Path, query: pb.NativeQuery
) -> None:
    provider_id = ProviderId.SLACK if query.provider == SLACK else ProviderId.GITHUB
    issuer = fakes.issuer(provider_id)
    grant = issuer.grant()
    async with serving(fakes, tmp_path, Metrics()) as client:
        account = await connect(client, query.provider, grant)
        issuer.expire_all()
        statuses, _ = await client.run(pb.SearchWorkspaceRequest(queries=[query]))
        assert [s.state for s in statuses] == [pb.QUERY_STATE_OK]
    issuer.expire_all()
    async with serving(fakes, tmp_path, Metrics()) as client:  # a new process, same database
        statuses, _ = await client.run(pb.SearchWorkspaceRequest(queries=[query]))
        assert [s.state for s in statuses] == [pb.QUERY_STATE_OK]  # the old one is spent
        assert (await states(client))[account] == pb.ACCOUNT_STATE_CONNECTED
    assert issuer.refreshes == 2


async def test_revoked_refresh_token_needs_reconnect_with_the_reason(
    fakes: FakeProviders, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    issuer = fakes.issuer(ProviderId.GOOGLE_DRIVE)
    grant = issuer.grant()
    metrics = Metrics()
    async with serving(fakes, tmp_path, metrics) as client:
        account = await connect(client, DRIVE, grant)
        issuer.expire_all()
        issuer.revoke()
        statuses, _ = await client.run(pb.SearchWorkspaceRequest(queries=[DRIVE_QUERY]))
        (status,) = statuses
        assert status.state == pb.QUERY_STATE_NEEDS_RECONNECT
        assert "Google refused the refresh token (invalid_grant" in status.message
        assert "reconnect the account" in status.message
        assert (await states(client))[account] == pb.ACCOUNT_STATE_NEEDS_RECONNECT
    assert refreshes(metrics, "google_drive", "needs_reconnect") == 1
    assert_no_secrets([caplog.text, status.message], grant.access_token, grant.refresh_token,
                      issuer.client_secret)


async def test_token_endpoint_503_keeps_the_account_connected(
    fakes: FakeProviders, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    issuer = fakes.issuer(ProviderId.GOOGLE_DRIVE)
    grant = issuer.grant()
    metrics = Metrics()
    async with serving(fakes, tmp_path, metrics) as client:
        account = await connect(client, DRIVE, grant)
        issuer.expire_all()
        issuer.fail_status(503)
        runs = await asyncio.gather(*(
            client.run(pb.SearchWorkspaceRequest(queries=[DRIVE_QUERY])) for _ in range(5)
        ))
        assert {len(statuses) for statuses, _ in runs} == {1}
        status = runs[0][0][0]
        assert {statuses[0].state for statuses, _ in runs} == {pb.QUERY_STATE_FAILED}
        assert "the account stays connected, try again later" in status.message
        assert (await states(client))[account] == pb.ACCOUNT_STATE_CONNECTED
        # The queries behind the failed refresh got its answer without asking again.
        assert issuer.requests[issuer.path] == 1
    assert refreshes(metrics, "google_drive", "failed") == 1
    assert_no_secrets([caplog.text, status.message], grant.access_token, grant.refresh_token,
                      issuer.client_secret)


async def test_a_kept_alive_connection_the_token_endpoint_closed_is_sent_once_more(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    """The token endpoint, like any HTTP/1.1 server, may close an idle kept-alive connection
    just as a refresh goes out on it. The refresh failed ("could not reach the token
    endpoint"), and so did the query, though the endpoint was fine; it is sent once more on a
    new connection, as the provider client does (a connection that ended before any answer
    began, and only once)."""
    issuer = fakes.issuer(ProviderId.GOOGLE_DRIVE)
    grant = issuer.grant()
    fakes.google_drive.add_file("f1", "plan.doc")
    async with serving(fakes, tmp_path, Metrics()) as client:
        await connect(client, DRIVE, grant, expires=grant.expires_at)
        issuer.expire_all()
        first, _ = await client.run(pb.SearchWorkspaceRequest(queries=[DRIVE_QUERY]))
        assert [s.state for s in first] == [pb.QUERY_STATE_OK]  # the connection is kept alive
        issuer.expire_all()
        issuer.close_kept_alive(times=1)
        second, pages = await client.run(pb.SearchWorkspaceRequest(queries=[DRIVE_QUERY]))
        assert [(s.state, s.message) for s in second] == [(pb.QUERY_STATE_OK, "")]
        assert [r.title for r in pages[0].results] == ["plan.doc"]
        assert issuer.refreshes == 2
        issuer.expire_all()
        issuer.reset_connection(times=3)  # the new connection ends unanswered too: no third
        third, _ = await client.run(pb.SearchWorkspaceRequest(queries=[DRIVE_QUERY]))
        assert [s.state for s in third] == [pb.QUERY_STATE_FAILED]
        assert "could not reach the google token endpoint" in third[0].message
        assert issuer.requests[issuer.path] == 5  # 1; the closed one and its resend; 2


async def test_token_endpoint_429_is_rate_limited_with_its_wait(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    issuer = fakes.issuer(ProviderId.SLACK)
    grant = issuer.grant()
    async with serving(fakes, tmp_path, Metrics()) as client:
        account = await connect(client, SLACK, grant)
        issuer.expire_all()
        issuer.rate_limit(30)
        statuses, _ = await client.run(pb.SearchWorkspaceRequest(queries=[SLACK_QUERY]))
        (status,) = statuses
        assert status.state == pb.QUERY_STATE_RATE_LIMITED
        assert status.retry_after.seconds == 30
        assert (await states(client))[account] == pb.ACCOUNT_STATE_CONNECTED
