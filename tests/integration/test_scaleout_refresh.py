"""Two server processes over one database never both spend a rotating refresh token (plus
the store method behind it, on both backends).

The fake OAuth, Slack and Jira servers run in the test process; the servers reach them through
`SEARCH_PROVIDER_BASE_URLS` and `SEARCH_OAUTH_*`. The token endpoint answers slowly, so both
servers are refreshing the same expired account at the same time: one spends the refresh
token, the other waits on the store's account lock and then uses the stored rotated tokens.
Two rotation rules, on PostgreSQL and on SQLite: Slack's single-use refresh token (a second
spend is refused) and Atlassian's (a 10-minute reuse window, so a second spend would still
succeed: the fake's count proves there was one; a reuse after the window revokes the whole
token family, so the second round, with the window closed, proves that neither server kept
the spent token).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path

import grpc
import pytest

from search_client.pb.search.v1 import accounts_pb2_grpc as apb_grpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as pb_grpc
from service.fakes.suite import FakeProviders
from service.store.base import AccountRecord, Store
from service.workspace.model import ProviderId
from tests.integration.conftest import at
from tests.integration.test_workspace_grpc import AUTH, Client
from tests.integration.test_workspace_refresh import SLACK, SLACK_QUERY, connect, states
from tests.support.pg import fresh_database
from tests.support.serve_process import served

pytestmark = pytest.mark.timeout(180)

QUERIES_PER_SERVER = 5
TOKEN_ENDPOINT_DELAY = 1.0  # long enough that both servers refresh at once


def _env(fakes: FakeProviders, database_url: str) -> dict[str, str]:
    return {
        "SEARCH_DATABASE_URL": database_url,
        "SEARCH_CREDENTIALS_KEY": base64.b64encode(b"k" * 32).decode(),
        "SEARCH_AUTH_TOKENS": AUTH,
        "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true",
        "SEARCH_PROVIDER_BASE_URLS": ",".join(f"{f.name}={f.base_url}" for f in fakes.all()),
        "SEARCH_LOG_LEVEL": "DEBUG",  # every record the servers write is grepped for tokens
        **fakes.oauth_settings(),
    }


def assert_no_token_logged(fakes: FakeProviders, root: Path) -> None:
    """Neither server process wrote a token or client secret to its log (stderr)."""
    secrets = {secret for issuer in fakes.issuers.values()
               for secret in (*issuer.issued(), issuer.client_secret)}
    logs = [(root / name / "server.log").read_text() for name in ("a", "b")]
    assert any("access token refreshed" in log for log in logs)  # the capture works
    for log in logs:
        assert not [secret for secret in secrets if secret in log]


@contextmanager
def two_servers(fakes: FakeProviders, database_url: str, root: Path) -> Iterator[list[str]]:
    """Two server processes sharing `database_url`; yields their addresses."""
    env = _env(fakes, database_url)
    with ExitStack() as stack:
        yield [stack.enter_context(served(root / name, env)) for name in ("a", "b")]


@asynccontextmanager
async def client_of(address: str) -> AsyncIterator[Client]:
    """Stubs on a channel to one server."""
    async with grpc.aio.insecure_channel(address) as channel:
        yield Client(pb_grpc.WorkspaceSearchServiceStub(channel),
                     apb_grpc.AccountServiceStub(channel))


SLACK_CASE = (ProviderId.SLACK, SLACK, SLACK_QUERY)
JIRA_CASE = (ProviderId.JIRA, cpb.PROVIDER_JIRA,
             pb.NativeQuery(provider=cpb.PROVIDER_JIRA, text='text ~ "plan"'))
CASES = [pytest.param(SLACK_CASE, id="slack-single-use"),
         pytest.param(JIRA_CASE, id="atlassian-reuse-window")]
Case = tuple[ProviderId, cpb.Provider, pb.NativeQuery]


async def _both_search_one_expired_account(
    fakes: FakeProviders, addresses: list[str], case: Case = SLACK_CASE
) -> None:
    provider_id, provider, query = case
    issuer = fakes.issuer(provider_id)
    if provider_id is ProviderId.JIRA:
        fakes.jira.add_site("c1", "acme")
        fakes.jira.add_issue("c1", "OPS-1", "release plan")
    grant = issuer.grant()
    async with client_of(addresses[0]) as first, client_of(addresses[1]) as second:
        account = await connect(first, provider, grant)  # no expiry given: refused, refreshed
        request = pb.SearchWorkspaceRequest(queries=[query])
        for round_ in (1, 2):
            issuer.expire_all()
            issuer.slow(TOKEN_ENDPOINT_DELAY, times=1)
            if round_ == 2:  # a spent token reused now revokes the family (Atlassian)
                issuer.reuse_window = 0.0
            runs = await asyncio.gather(*(
                client.run(request, seconds=30)
                for client in (first, second) for _ in range(QUERIES_PER_SERVER)
            ))
            assert [[s.state for s in statuses] for statuses, _ in runs] == (
                [[pb.QUERY_STATE_OK]] * (2 * QUERIES_PER_SERVER)
            )
            assert issuer.refreshes == round_  # one refresh a round, by one server
            assert [r.path for r in issuer.log] == [issuer.path] * round_
            assert (await states(first))[account] == pb.ACCOUNT_STATE_CONNECTED
            assert (await states(second))[account] == pb.ACCOUNT_STATE_CONNECTED


@pytest.mark.parametrize("case", CASES)
async def test_two_servers_over_one_postgresql_refresh_once(
    fakes: FakeProviders, pg_dsn: str, tmp_path: Path, case: Case
) -> None:
    async with fresh_database(pg_dsn) as dsn:
        with two_servers(fakes, dsn, tmp_path) as addresses:
            await _both_search_one_expired_account(fakes, addresses, case)
    assert_no_token_logged(fakes, tmp_path)


@pytest.mark.parametrize("case", CASES)
async def test_two_servers_over_one_sqlite_file_refresh_once(
    fakes: FakeProviders, tmp_path: Path, case: Case
) -> None:
    shared = (tmp_path / "shared" / "search.sqlite3").resolve()
    with two_servers(fakes, f"sqlite:///{shared}", tmp_path) as addresses:
        await _both_search_one_expired_account(fakes, addresses, case)
    assert_no_token_logged(fakes, tmp_path)


def _record(account_id: str = "a1", tenant: str = "acme") -> AccountRecord:
    return AccountRecord(
        account_id=account_id, tenant=tenant, provider="slack", display_name="work",
        base_url="", sealed_credentials=b"v0", created_at=at(1),
    )


async def test_store_refresh_runs_one_at_a_time_and_commits(store: Store) -> None:
    await store.create_account(_record())
    seen: list[bytes] = []
    inside = 0

    async def refresh(sealed: bytes) -> bytes:
        nonlocal inside
        inside += 1
        assert inside == 1  # never two at once
        seen.append(sealed)
        await asyncio.sleep(0.05)
        inside -= 1
        return b"v%d" % len(seen)

    results = await asyncio.gather(*(
        store.refresh_account_credentials("acme", "a1", refresh) for _ in range(3)
    ))
    assert seen == [b"v0", b"v1", b"v2"]  # each one read what the one before committed
    assert sorted(filter(None, results)) == [b"v1", b"v2", b"v3"]
    assert [a.sealed_credentials for a in await store.list_accounts("acme")] == [b"v3"]


async def test_store_refresh_keeps_or_rolls_back(store: Store) -> None:
    await store.create_account(_record())

    async def keep(sealed: bytes) -> None:
        del sealed

    async def fail(sealed: bytes) -> bytes:
        raise RuntimeError(sealed.decode())

    assert await store.refresh_account_credentials("acme", "a1", keep) == b"v0"
    with pytest.raises(RuntimeError, match="v0"):
        await store.refresh_account_credentials("acme", "a1", fail)
    assert [a.sealed_credentials for a in await store.list_accounts("acme")] == [b"v0"]
    assert await store.refresh_account_credentials("acme", "b1", keep) is None
    assert await store.refresh_account_credentials("globex", "a1", keep) is None
