"""Tenant isolation over every RPC, secrets kept out of logs and replies, private base URLs.

Bob owns projects, documents, an account and page tokens and cursors; alice (another tenant,
admin role) tries to reach each of them through every method of the contract. Every attempt is
refused the documented way (NOT_FOUND indistinguishable from a missing id, INVALID_ARGUMENT
for another tenant's token, cursor or account id, a rejected document in an upsert summary),
and bob's data is unchanged afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import accounts_pb2_grpc as agrpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import index_pb2 as ipb
from search_client.pb.search.v1 import index_pb2_grpc as igrpc
from search_client.pb.search.v1 import project_search_pb2 as ppb
from search_client.pb.search.v1 import project_search_pb2_grpc as pgrpc
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wgrpc
from service.fakes.suite import FakeProviders
from service.server import SERVICES
from tests.support.reliability.world import server_env
from tests.support.server import running_server
from tests.support.status import Decoded, decode

ALICE, BOB, READER = "alice-bearer-s3cret", "bob-bearer-s3cret", "reader-bearer-s3cret"
AUTH = ",".join(
    f"{hashlib.sha256(t.encode()).hexdigest()}:{tenant}:{role}"
    for t, tenant, role in ((ALICE, "alice", "admin"), (BOB, "bob", "admin"),
                            (READER, "alice", "read"))
)
SLACK, GITHUB, JIRA = cpb.PROVIDER_SLACK, cpb.PROVIDER_GITHUB, cpb.PROVIDER_JIRA


class Client:
    """Stubs of every service, calling as one bearer token."""

    def __init__(self, channel: grpc.aio.Channel, token: str) -> None:
        self.index = igrpc.IndexServiceStub(channel)
        self.search = pgrpc.ProjectSearchServiceStub(channel)
        self.workspace = wgrpc.WorkspaceSearchServiceStub(channel)
        self.accounts = agrpc.AccountServiceStub(channel)
        self.meta = (("authorization", f"Bearer {token}"),)

    async def projects(self, request: ppb.SearchProjectsRequest) -> list[ppb.ProjectSearchPage]:
        """Every page of a project search."""
        return [m.page async for m in self.search.SearchProjects(request, metadata=self.meta)]

    async def workspace_search(self, request: wpb.SearchWorkspaceRequest) -> (
        list[wpb.SearchWorkspaceResponse]
    ):
        """Every message of a workspace search."""
        return [m async for m in self.workspace.SearchWorkspace(request, metadata=self.meta)]

    async def upsert(self, pid: int, *docs: ipb.Document) -> ipb.UpsertDocumentsResponse:
        """One upsert stream of one message."""
        async def stream() -> AsyncIterator[ipb.UpsertDocumentsRequest]:
            yield ipb.UpsertDocumentsRequest(project_id=pid, documents=docs)

        reply: ipb.UpsertDocumentsResponse = await self.index.UpsertDocuments(
            stream(), metadata=self.meta
        )
        return reply


@dataclass
class Bob:
    """What bob owns, as alice could learn the identifiers."""

    project_id: int
    external_id: str
    account_id: str
    list_token: str
    search_token: str
    page_token: str
    cursor: str


def _doc(row: str, body: str) -> ipb.Document:
    return ipb.Document(kind="note", row_id=row, title=row, body=body)


async def _bob(bob: Client, fakes: FakeProviders) -> Bob:
    ids = []
    for name in ("bob-a", "bob-b"):
        created = await bob.index.CreateProject(ipb.CreateProjectRequest(external_id=name),
                                                metadata=bob.meta)
        ids.append(created.project.project_id)
        await bob.upsert(ids[-1], *(_doc(str(i), f"nebula secret plan {i}") for i in range(5)))
    listed = await bob.index.ListProjects(ipb.ListProjectsRequest(page_size=1), metadata=bob.meta)
    account = await bob.accounts.ConnectAccount(apb.ConnectAccountRequest(
        provider=SLACK, display_name="bob", credentials=apb.Credentials(token=fakes.slack.token)),
        metadata=bob.meta)
    pages = await bob.projects(ppb.SearchProjectsRequest(
        scope=ppb.ProjectScope(project_ids=ids[:1]), text="nebula", page_size=2))
    messages = await bob.workspace_search(wpb.SearchWorkspaceRequest(
        queries=[wpb.NativeQuery(provider=SLACK, text="deploy")], top_k=2))
    statuses = [m.query_status for m in messages if m.HasField("query_status")]
    page = next(m.page for m in messages if m.HasField("page"))
    assert page.next_page_token
    assert statuses[-1].next_cursor
    return Bob(ids[0], "bob-a", account.account.account_id, listed.next_page_token,
               pages[0].next_page_token, page.next_page_token, statuses[-1].next_cursor)


Attack = Callable[[Client, Bob], Awaitable[Any]]


def _refused(code: grpc.StatusCode, reason: str, field: str = "") -> Callable[[Decoded], None]:
    def check(decoded: Decoded) -> None:
        assert decoded.code == code, decoded
        assert decoded.info is not None
        assert decoded.info.reason == reason, decoded
        if field:
            assert [f for f, _ in decoded.violations] == [field], decoded

    return check


NOT_FOUND = _refused(grpc.StatusCode.NOT_FOUND, "PROJECT_NOT_FOUND")
BAD_TOKEN = _refused(grpc.StatusCode.INVALID_ARGUMENT, "PAGE_TOKEN_INVALID", "page_token")
WS_QUERY = [wpb.NativeQuery(provider=SLACK, text="deploy")]
# (method, what alice tries, how it must be refused)
ATTACKS: list[tuple[str, str, Attack, Callable[[Decoded], None]]] = [
    ("ListProjects", "bob's page token", lambda a, b: a.index.ListProjects(
        ipb.ListProjectsRequest(page_size=1, page_token=b.list_token), metadata=a.meta),
     BAD_TOKEN),
    ("DeleteProject", "bob's project", lambda a, b: a.index.DeleteProject(
        ipb.DeleteProjectRequest(project_id=b.project_id), metadata=a.meta), NOT_FOUND),
    ("DeleteDocuments", "bob's project", lambda a, b: a.index.DeleteDocuments(
        ipb.DeleteDocumentsRequest(project_id=b.project_id,
                                   keys=[ipb.DocumentKey(kind="note", row_id="1")]),
        metadata=a.meta), NOT_FOUND),
    ("GetIndexStatus", "bob's project", lambda a, b: a.index.GetIndexStatus(
        ipb.GetIndexStatusRequest(project_ids=[b.project_id]), metadata=a.meta), NOT_FOUND),
    ("SearchProjects", "bob's project", lambda a, b: a.projects(ppb.SearchProjectsRequest(
        scope=ppb.ProjectScope(project_ids=[b.project_id]), text="nebula")), NOT_FOUND),
    ("SearchProjects", "bob's page token", lambda a, b: a.projects(ppb.SearchProjectsRequest(
        scope=ppb.ProjectScope(project_ids=[b.project_id]), text="nebula", page_size=2,
        page_token=b.search_token)), BAD_TOKEN),
    ("SearchWorkspace", "bob's account", lambda a, b: a.workspace_search(
        wpb.SearchWorkspaceRequest(queries=[wpb.NativeQuery(
            provider=SLACK, text="deploy", account_id=b.account_id)])),
     _refused(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "queries[0].account_id")),
    ("SearchWorkspace", "bob's page token", lambda a, b: a.workspace_search(
        wpb.SearchWorkspaceRequest(queries=WS_QUERY, top_k=2, page_token=b.page_token)),
     BAD_TOKEN),
    ("SearchWorkspace", "bob's cursor", lambda a, b: a.workspace_search(
        wpb.SearchWorkspaceRequest(queries=[wpb.NativeQuery(
            provider=SLACK, text="deploy", cursor=b.cursor)], top_k=2)),
     _refused(grpc.StatusCode.INVALID_ARGUMENT, "PAGE_TOKEN_INVALID", "queries[0].cursor")),
    ("UpdateAccountCredentials", "bob's account", lambda a, b:
     a.accounts.UpdateAccountCredentials(apb.UpdateAccountCredentialsRequest(
         account_id=b.account_id, credentials=apb.Credentials(token="tok-alice-takeover")),
         metadata=a.meta),
     _refused(grpc.StatusCode.NOT_FOUND, "ACCOUNT_NOT_FOUND")),
    ("DisconnectAccount", "bob's account", lambda a, b: a.accounts.DisconnectAccount(
        apb.DisconnectAccountRequest(account_id=b.account_id), metadata=a.meta),
     _refused(grpc.StatusCode.NOT_FOUND, "ACCOUNT_NOT_FOUND")),
]
# Methods that take no identifier of another tenant's; checked below by what they return.
UNADDRESSABLE = {"CreateProject", "UpsertDocuments", "ListAccounts", "ConnectAccount"}


def test_the_table_covers_every_method() -> None:
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.Default()
    every = {m.name for name in SERVICES for m in pool.FindServiceByName(name).methods}
    assert {name for name, *_ in ATTACKS} | UNADDRESSABLE == every


@pytest.fixture
def auth_env(fakes: FakeProviders) -> dict[str, str]:
    """Two tenants (plus a read-only token of alice's) and providers on the fakes."""
    return server_env(fakes) | {"SEARCH_AUTH_TOKENS": AUTH}


async def test_no_rpc_reaches_another_tenants_data(
    fakes: FakeProviders, tmp_path: Path, auth_env: dict[str, str]
) -> None:
    for i in range(6):
        fakes.slack.add_message("C1", "general", f"{100 + i}.000000", f"deploy step {i}")
    async with running_server(tmp_path, auth_env) as app, grpc.aio.insecure_channel(
        f"127.0.0.1:{app.port}"
    ) as channel:
        alice, bob_client = Client(channel, ALICE), Client(channel, BOB)
        bob = await _bob(bob_client, fakes)
        before = await bob_client.index.GetIndexStatus(ipb.GetIndexStatusRequest(),
                                                       metadata=bob_client.meta)
        mine = await alice.index.CreateProject(  # bob's external id too: it must not leak
            ipb.CreateProjectRequest(external_id=bob.external_id), metadata=alice.meta)
        assert mine.project.project_id != bob.project_id
        await alice.accounts.ConnectAccount(apb.ConnectAccountRequest(
            provider=SLACK, display_name="alice",
            credentials=apb.Credentials(token=fakes.slack.token)), metadata=alice.meta)
        for method, what, attack, check in ATTACKS:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await attack(alice, bob)
            check(decode(caught.value))
            if check is NOT_FOUND:  # indistinguishable from an id that exists nowhere
                missing = Bob(**{**vars(bob), "project_id": 10**12})
                with pytest.raises(grpc.aio.AioRpcError) as unknown:
                    await attack(alice, missing)
                assert (caught.value.details() or "").replace(str(bob.project_id), "#") == (
                    (unknown.value.details() or "").replace(str(10**12), "#")
                ), (method, what)
        upsert = await alice.upsert(bob.project_id, _doc("x", "overwrite"))
        assert [(r.outcome, r.field) for r in upsert.results] == [
            (ipb.DOCUMENT_OUTCOME_REJECTED, "messages[0].project_id")
        ]
        listed = await alice.index.ListProjects(ipb.ListProjectsRequest(), metadata=alice.meta)
        assert [p.project_id for p in listed.projects] == [mine.project.project_id]
        accounts = await alice.workspace.ListAccounts(wpb.ListAccountsRequest(),
                                                      metadata=alice.meta)
        assert bob.account_id not in {a.account_id for a in accounts.accounts}
        status = await alice.index.GetIndexStatus(ipb.GetIndexStatusRequest(), metadata=alice.meta)
        assert [s.project_id for s in status.projects] == [mine.project.project_id]
        after = await bob_client.index.GetIndexStatus(ipb.GetIndexStatusRequest(),
                                                      metadata=bob_client.meta)
        assert after == before
        bob_accounts = await bob_client.workspace.ListAccounts(wpb.ListAccountsRequest(),
                                                               metadata=bob_client.meta)
        assert [a.account_id for a in bob_accounts.accounts] == [bob.account_id]


# ---- secrets ---------------------------------------------------------------------------------

WRONG_PROVIDER_TOKEN = "tok-wrong-provider-s3cret"
REJECTED_TOKEN = "tok with-space-s3cret"
WRONG_BEARER = "unknown-bearer-s3cret"
REFRESH_TOKEN = "xoxe-1-refresh-s3cret"
JIRA_USER = "jane@example.com"


def _secrets(fakes: FakeProviders) -> list[str]:
    pair = f"{JIRA_USER}:{fakes.jira.token}".encode()
    return [ALICE, BOB, READER, WRONG_BEARER, fakes.slack.token, fakes.github.token,
            fakes.jira.token, WRONG_PROVIDER_TOKEN, REJECTED_TOKEN.split()[1], REFRESH_TOKEN,
            base64.b64encode(pair).decode(), hashlib.sha256(ALICE.encode()).hexdigest()]


async def _exercise(channel: grpc.aio.Channel, fakes: FakeProviders) -> list[str]:
    """Successful and failing calls that handle every secret; every reply and error as text."""
    alice, stranger, reader = Client(channel, ALICE), Client(channel, WRONG_BEARER), Client(
        channel, READER)
    seen: list[str] = []

    async def call(work: Awaitable[Any]) -> None:
        try:
            seen.append(str(await work))
        except grpc.aio.AioRpcError as error:
            seen.append(f"{error.code()} {error.details()} {error.trailing_metadata()}")

    def connect(provider: cpb.Provider, token: str, user: str = "") -> Awaitable[Any]:
        site = fakes.jira.base_url if user else ""  # basic auth talks to its site
        return alice.accounts.ConnectAccount(apb.ConnectAccountRequest(
            provider=provider, display_name=f"p{provider}", base_url=site,
            credentials=apb.Credentials(token=token, username=user)), metadata=alice.meta)

    fakes.jira.add_site("cloud-1", "acme")
    await call(connect(SLACK, fakes.slack.token))
    await call(connect(GITHUB, WRONG_PROVIDER_TOKEN))  # the provider will answer 401
    await call(connect(JIRA, fakes.jira.token, JIRA_USER))
    await call(connect(SLACK, REJECTED_TOKEN))  # invalid: must not be echoed
    await call(stranger.index.ListProjects(ipb.ListProjectsRequest(), metadata=stranger.meta))
    await call(reader.accounts.ConnectAccount(apb.ConnectAccountRequest(), metadata=reader.meta))
    fakes.slack.fail_status(500, times=1)
    for _ in range(2):
        await call(alice.workspace_search(wpb.SearchWorkspaceRequest(queries=[
            wpb.NativeQuery(provider=SLACK, text="deploy"),
            wpb.NativeQuery(provider=GITHUB, text="bug", kind=wpb.QUERY_KIND_ISSUES),
            wpb.NativeQuery(provider=JIRA, text='text ~ "deploy"')])))
    rotating = await alice.accounts.ConnectAccount(apb.ConnectAccountRequest(
        provider=SLACK, display_name="rotating", credentials=apb.Credentials(
            token=fakes.slack.token, refresh_token=REFRESH_TOKEN)), metadata=alice.meta)
    seen.append(str(rotating))
    for refresh in (REFRESH_TOKEN + "-next", "bad " + REFRESH_TOKEN):  # replaced, then refused
        await call(alice.accounts.UpdateAccountCredentials(apb.UpdateAccountCredentialsRequest(
            account_id=rotating.account.account_id, credentials=apb.Credentials(
                token=fakes.slack.token, refresh_token=refresh)), metadata=alice.meta))
    await call(alice.workspace.ListAccounts(wpb.ListAccountsRequest(), metadata=alice.meta))
    return seen


async def test_credentials_never_reach_logs_errors_or_replies(
    fakes: FakeProviders, tmp_path: Path, auth_env: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    env = auth_env | {"SEARCH_LOG_LEVEL": "DEBUG", "SEARCH_ALLOW_PRIVATE_BASE_URLS": "true"}
    async with running_server(tmp_path, env) as app, grpc.aio.insecure_channel(
        f"127.0.0.1:{app.port}"
    ) as channel:
        seen = await _exercise(channel, fakes)
    assert any("NEEDS_RECONNECT" in text for text in seen)  # the 401 path ran
    assert any(r.headers.get("authorization", "").startswith("Basic ")
               for r in fakes.jira.log)  # the basic-auth path ran
    assert any("UNAUTHENTICATED" in text for text in seen)
    assert any("credentials.token" in text for text in seen)  # the rejected token path ran
    assert any("credentials.refresh_token" in text for text in seen)
    assert any("refreshable: true" in text for text in seen)  # the replaced credentials listed
    logged = caplog.text + "\n".join(repr(r.__dict__) for r in caplog.records)
    assert "account connected" in logged  # the capture saw the service's own logs
    for secret in _secrets(fakes):
        assert secret not in logged, f"secret in logs: {secret[:6]}..."
        assert not any(secret in text for text in seen), f"secret in a reply: {secret[:6]}..."


# ---- self-hosted base URLs -------------------------------------------------------------------

PRIVATE_URLS = [
    "https://127.0.0.1", "https://127.1.2.3:8443/api", "https://localhost/api/v3",
    "https://10.0.0.8", "https://172.16.5.4", "https://192.168.1.10", "https://169.254.169.254",
    "https://100.64.0.1", "https://0.0.0.0", "https://[::1]", "https://[fd00::1]",
    "https://[fe80::1]", "https://[::ffff:127.0.0.1]", "https://2130706433", "https://0x7f.1",
    "https://224.0.0.1",
    # loopback and private IPv4 reached through IPv6 translation: NAT64, 6to4, Teredo
    "https://[64:ff9b::7f00:1]", "https://[64:ff9b::a00:8]", "https://[64:ff9b:1::c0a8:10a]",
    "https://[2002:7f00:1::1]", "https://[2002:c0a8:10a::]",
    "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]",
    # ports outside 1..65535
    "https://93.184.216.34:0/api", "https://93.184.216.34:65536", "https://93.184.216.34:99999",
]


@pytest.mark.parametrize("provider", [GITHUB, cpb.PROVIDER_GITLAB, JIRA, cpb.PROVIDER_CONFLUENCE])
async def test_private_base_urls_are_refused_unless_allowed(
    tmp_path: Path, provider: cpb.Provider
) -> None:
    def request(url: str) -> apb.ConnectAccountRequest:
        return apb.ConnectAccountRequest(
            provider=provider, display_name="self-hosted", base_url=url,
            credentials=apb.Credentials(token="tok-self-hosted"))

    async with running_server(tmp_path / "strict") as app, grpc.aio.insecure_channel(
        f"127.0.0.1:{app.port}"
    ) as channel:
        stub = agrpc.AccountServiceStub(channel)
        for url in PRIVATE_URLS:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ConnectAccount(request(url))
            decoded = decode(caught.value)
            assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT, url
            assert [f for f, _ in decoded.violations] == ["base_url"], url
        public = await stub.ConnectAccount(request("https://93.184.216.34/api"))
        assert public.account.base_url == "https://93.184.216.34/api"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ConnectAccount(request("http://93.184.216.34"))  # plain http
        assert decode(caught.value).violations[0][0] == "base_url"
    allowed = {"SEARCH_ALLOW_PRIVATE_BASE_URLS": "true"}
    async with running_server(tmp_path / "allowed", allowed) as app, grpc.aio.insecure_channel(
        f"127.0.0.1:{app.port}"
    ) as channel:
        stub = agrpc.AccountServiceStub(channel)
        for url in ("https://127.0.0.1", "https://10.0.0.8/api", "https://[::1]"):
            reply = await stub.ConnectAccount(request(url))
            assert reply.account.base_url == url
