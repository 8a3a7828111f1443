"""Workspace search and accounts through a real gRPC server and channel, providers faked."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import accounts_pb2_grpc as apb_grpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as pb_grpc
from service.api.interceptor import ServiceInterceptor
from service.api.workspace_wiring import build_workspace_servicers, parse_base_urls
from service.auth import Authenticator
from service.fakes.suite import FakeProviders
from service.ranking.tokens import TokenSigner
from service.settings import Settings, SettingsError
from service.store.sqlite import SqliteStore
from service.workspace.model import ProviderId
from tests.support.status import decode

pytest_plugins = ["tests.fakes.fixtures"]

TOKENS = {"alice-token": ("tenant-a", "admin"), "bob-token": ("tenant-b", "admin"),
          "reader-token": ("tenant-a", "read")}
AUTH = ",".join(
    f"{hashlib.sha256(t.encode()).hexdigest()}:{tenant}:{role}"
    for t, (tenant, role) in TOKENS.items()
)
SLACK = cpb.PROVIDER_SLACK
SEARCH_PATH = "/api/assistant.search.context"


@dataclass
class Client:
    """Stubs plus the caller's bearer token."""

    search: pb_grpc.WorkspaceSearchServiceAsyncStub
    accounts: apb_grpc.AccountServiceAsyncStub
    token: str = "alice-token"

    def as_(self, token: str) -> Client:
        """The same stubs for another caller."""
        return Client(self.search, self.accounts, token)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Call metadata with the bearer token."""
        return (("authorization", f"Bearer {self.token}"),)

    async def connect(self, fakes: FakeProviders, provider: cpb.Provider = SLACK) -> str:
        """Connect an account to the fake; returns its id."""
        tokens = {SLACK: fakes.slack.token, cpb.PROVIDER_GMAIL: fakes.gmail.token}
        token = tokens.get(provider, fakes.github.token)
        request = apb.ConnectAccountRequest(
            provider=provider, display_name="work", credentials=apb.Credentials(token=token)
        )
        reply = await self.accounts.ConnectAccount(request, metadata=self.metadata)
        return reply.account.account_id

    async def run(
        self, request: pb.SearchWorkspaceRequest, seconds: float | None = None
    ) -> tuple[list[pb.QueryStatus], list[pb.FusedPage]]:
        """Stream a search to its end (`seconds`: the call's gRPC timeout)."""
        statuses: list[pb.QueryStatus] = []
        pages: list[pb.FusedPage] = []
        call = self.search.SearchWorkspace(request, metadata=self.metadata, timeout=seconds)
        async for message in call:
            if message.HasField("page"):
                pages.append(message.page)
            else:
                statuses.append(message.query_status)
        return statuses, pages


@asynccontextmanager
async def serving(
    fakes: FakeProviders, data_dir: Path, *, env: Mapping[str, str] | None = None,
    **wiring: Any,
) -> AsyncIterator[Client]:
    """A real gRPC server (the service's interceptor and servicers) on port 0; `env` adds
    settings, `wiring` passes options to build_workspace_servicers."""
    settings = Settings.from_mapping({"SEARCH_DATA_DIR": str(data_dir), **(env or {})})
    store = SqliteStore(data_dir / "search.sqlite3", None)
    await store.open()
    overrides = ",".join(f"{f.name}={f.base_url}" for f in fakes.all() if f.name != "fake")
    closers: list[Callable[[], Awaitable[None]]] = []
    servicers = build_workspace_servicers(
        settings, store, TokenSigner(b"g" * 32), allow_insecure_http=True,
        base_url_overrides=parse_base_urls(overrides), closers=closers,
        **{"max_rounds_per_page": 12, **wiring},
    )
    server = grpc.aio.server(interceptors=[ServiceInterceptor(Authenticator(AUTH), 64)])
    pb_grpc.add_WorkspaceSearchServiceServicer_to_server(
        servicers["search.v1.WorkspaceSearchService"], server
    )
    apb_grpc.add_AccountServiceServicer_to_server(servicers["search.v1.AccountService"], server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Client(pb_grpc.WorkspaceSearchServiceStub(channel),
                         apb_grpc.AccountServiceStub(channel))
    finally:
        await server.stop(0)
        for close in closers:
            await close()
        await store.close()


def q(text: str, **fields: object) -> pb.NativeQuery:
    """A Slack native query unless told otherwise."""
    values: dict[str, object] = {"provider": SLACK, "text": text}
    values.update(fields)
    return pb.NativeQuery(**values)  # type: ignore[arg-type]


async def test_connect_list_and_search_through_the_channel(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        account = await client.connect(fakes)
        listed = await client.search.ListAccounts(pb.ListAccountsRequest(),
                                                  metadata=client.metadata)
        assert [a.account_id for a in listed.accounts] == [account]
        assert listed.accounts[0].state == pb.ACCOUNT_STATE_CONNECTED
        assert listed.accounts[0].card.provider == SLACK
        assert [c.provider for c in listed.guidance.cards] == [SLACK]
        assert fakes.slack.token not in str(listed)
        fakes.slack.add_message("C1", "general", "300.000000", "trip plan")
        fakes.slack.add_message("C1", "general", "250.000000", "travel budget")
        fakes.slack.add_message("C1", "general", "200.000000", "trip travel both")
        statuses, pages = await client.run(
            pb.SearchWorkspaceRequest(queries=[q("trip"), q("travel")])
        )
        assert sorted({s.query_index for s in statuses}) == [0, 1]
        assert {s.state for s in statuses} == {pb.QUERY_STATE_OK}
        (page,) = pages
        assert page.results[0].title == "#general"
        assert [(c.query_index, c.rank) for c in page.results[0].contributions] == [(0, 2), (1, 2)]
        assert page.rrf_k == 60
        assert page.ranking_is_exact
        assert [c.provider for c in page.cards] == [SLACK]
        assert page.results[0].update_time.seconds == 200


async def test_a_provider_text_cut_inside_an_emoji_is_served_not_an_internal_error(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    """Slack's JSON carries `\\ud83d` without its pair (text cut at a UTF-16 unit): the
    result is served with U+FFFD in its place (it failed the whole call with INTERNAL: a lone
    surrogate cannot be encoded in a protobuf string)."""
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        fakes.slack.add_message("C1", "general", "300.000000", "trip plan \ud83d")
        fakes.slack.add_message("C1", "general", "200.000000", "trip \ud83d\ude00 fine")
        statuses, pages = await client.run(pb.SearchWorkspaceRequest(queries=[q("trip")]))
    assert [s.state for s in statuses] == [pb.QUERY_STATE_OK]
    (page,) = pages
    snippets = [r.snippet for r in page.results]
    assert snippets == ["Jane: trip plan \ufffd", "Jane: trip \U0001f600 fine"]


async def _messages(client: Client, request: pb.SearchWorkspaceRequest
                    ) -> list[pb.SearchWorkspaceResponse]:
    call = client.search.SearchWorkspace(request, metadata=client.metadata)
    return [message async for message in call]


async def test_statuses_in_the_page_are_the_statuses_streamed_before_it(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    """STATUS_DELIVERY_IN_PAGE: one stream message per page, whose `statuses` are exactly the
    query_status messages STREAMED sends before that page (a skipped query, three pages);
    the results and tokens are the same."""
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        for n in range(14):
            fakes.slack.add_message("C1", "general", f"{300 + n}.000000", f"trip day {n}")
        queries = [q("trip"), q("day"), q("x", provider=cpb.PROVIDER_JIRA)]
        runs: dict[int, list[pb.SearchWorkspaceResponse]] = {}
        for delivery in (pb.STATUS_DELIVERY_STREAMED, pb.STATUS_DELIVERY_IN_PAGE):
            runs[delivery] = await _messages(client, pb.SearchWorkspaceRequest(
                queries=queries, top_k=5, max_pages=3, status_delivery=delivery))
        streamed, in_page = runs[pb.STATUS_DELIVERY_STREAMED], runs[pb.STATUS_DELIVERY_IN_PAGE]
        assert all(m.HasField("page") for m in in_page)
        expected: list[list[pb.QueryStatus]] = [[]]
        for message in streamed:
            if message.HasField("page"):
                expected.append([])
            else:
                expected[-1].append(message.query_status)
        assert len(in_page) == len(expected) - 1 == 3
        assert [list(m.page.statuses) for m in in_page] == expected[:-1]
        assert {s.state for s in expected[0]} >= {pb.QUERY_STATE_OK, pb.QUERY_STATE_SKIPPED}
        bare = [pb.FusedPage(results=m.page.results, next_page_token=m.page.next_page_token)
                for m in in_page]
        assert bare == [pb.FusedPage(results=m.page.results,
                                     next_page_token=m.page.next_page_token)
                        for m in streamed if m.HasField("page")]
        assert all(not m.page.statuses for m in streamed if m.HasField("page"))


def _violations(error: grpc.aio.AioRpcError) -> list[str]:
    return [field for field, _ in decode(error).violations]


@pytest.mark.parametrize(
    ("request_", "fields"),
    [
        (pb.SearchWorkspaceRequest(), ["queries"]),
        (pb.SearchWorkspaceRequest(queries=[q("x")], top_k=51), ["top_k"]),
        (pb.SearchWorkspaceRequest(queries=[q("x")], max_pages=11), ["max_pages"]),
        (pb.SearchWorkspaceRequest(queries=[q("")]), ["queries[0].text"]),
        (pb.SearchWorkspaceRequest(queries=[q("x", provider=99)]), ["queries[0].provider"]),
        (pb.SearchWorkspaceRequest(queries=[q("x", kind=42)]), ["queries[0].kind"]),
        (pb.SearchWorkspaceRequest(queries=[q("a" * 257, provider=cpb.PROVIDER_GITHUB)]),
         ["queries[0].text"]),
        (pb.SearchWorkspaceRequest(queries=[q("a b"), q(" A  B ")]), ["queries[1]"]),
        (pb.SearchWorkspaceRequest(queries=[q(f"t{i}") for i in range(5)]), ["queries[4]"]),
        (pb.SearchWorkspaceRequest(queries=[q("x", account_id="acc_nope")]),
         ["queries[0].account_id"]),
        (pb.SearchWorkspaceRequest(queries=[q("x", time_range=cpb.TimeRange(
            start_time=timestamp_pb2.Timestamp(seconds=20),
            end_time=timestamp_pb2.Timestamp(seconds=10)))]), ["queries[0].time_range"]),
        (pb.SearchWorkspaceRequest(queries=[q("x", provider=cpb.PROVIDER_GITHUB, kind=1),
                                            q("y", provider=cpb.PROVIDER_GITHUB, kind=1)]),
         ["queries[1].kind"]),
        (pb.SearchWorkspaceRequest(queries=[q("x")], status_delivery=7),  # type: ignore[arg-type]
         ["status_delivery"]),
    ],
)
async def test_validation_rules_come_back_as_field_violations(
    fakes: FakeProviders, tmp_path: Path, request_: pb.SearchWorkspaceRequest, fields: list[str]
) -> None:
    async with serving(fakes, tmp_path) as client:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client.run(request_)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _violations(caught.value) == fields


async def test_limits_tokens_and_tenants(fakes: FakeProviders, tmp_path: Path) -> None:
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client.run(pb.SearchWorkspaceRequest(queries=[q(f"t{i}") for i in range(33)]))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # retrying never helps
        assert _violations(caught.value) == ["queries"]
        for i in range(6):
            fakes.slack.add_message("C1", "general", f"{100 + i}.000000", "deploy")
        _, pages = await client.run(pb.SearchWorkspaceRequest(queries=[q("deploy")], top_k=2))
        token = pages[0].next_page_token
        bob = client.as_("bob-token")
        await bob.connect(fakes)
        for stranger, request in [
            (bob, pb.SearchWorkspaceRequest(queries=[q("deploy")], top_k=2, page_token=token)),
            (client, pb.SearchWorkspaceRequest(queries=[q("deploy")], top_k=2,
                                               page_token=token[:-3] + "AAA")),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stranger.run(request)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert decode(caught.value).info.reason == "PAGE_TOKEN_INVALID"  # type: ignore[union-attr]
        alice_account = (await client.search.ListAccounts(
            pb.ListAccountsRequest(), metadata=client.metadata)).accounts[0].account_id
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await bob.run(pb.SearchWorkspaceRequest(queries=[q("x", account_id=alice_account)]))
        assert _violations(caught.value) == ["queries[0].account_id"]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await bob.accounts.DisconnectAccount(
                apb.DisconnectAccountRequest(account_id=alice_account), metadata=bob.metadata
            )
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        reader = client.as_("reader-token")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await reader.connect(fakes)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_connect_rejects_a_base_url_for_a_cloud_only_provider(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        request = apb.ConnectAccountRequest(
            provider=SLACK, display_name="x", base_url="https://slack.example.com",
            credentials=apb.Credentials(token="secret-token-value"),
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client.accounts.ConnectAccount(request, metadata=client.metadata)
        assert _violations(caught.value) == ["base_url"]
        assert "secret-token-value" not in str(caught.value)


async def test_client_cancellation_stops_provider_requests(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        for i in range(60):
            fakes.slack.add_message("C1", "general", f"{1000 + i}.000000", "alpha bravo")
        fakes.slack.server.latency = 0.2
        call = client.search.SearchWorkspace(
            pb.SearchWorkspaceRequest(queries=[q("alpha"), q("bravo")], top_k=5, max_pages=10),
            metadata=client.metadata,
        )
        while fakes.slack.requests[SEARCH_PATH] < 3:  # noqa: ASYNC110 - the fake owns the count
            await asyncio.sleep(0.01)
        call.cancel()
        count = fakes.slack.requests[SEARCH_PATH]
        await asyncio.sleep(0.6)
        assert fakes.slack.requests[SEARCH_PATH] <= count + 1  # at most one already on the wire
        settled = fakes.slack.requests[SEARCH_PATH]
        await asyncio.sleep(0.4)
        assert fakes.slack.requests[SEARCH_PATH] == settled


async def test_the_call_deadline_times_out_slow_providers_only(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        await client.connect(fakes, cpb.PROVIDER_GITHUB)
        fakes.github.add_repo("acme/app")
        fakes.github.add_issue("acme/app", 1, "bug one")
        fakes.slack.server.latency = 3.0
        loop = asyncio.get_running_loop()
        started = loop.time()
        statuses, pages = await client.run(
            pb.SearchWorkspaceRequest(queries=[
                q("deploy"), q("bug", provider=cpb.PROVIDER_GITHUB, kind=pb.QUERY_KIND_ISSUES),
            ]),
            seconds=1.0,
        )
        assert loop.time() - started < 1.0
        states = {s.query_index: s.state for s in statuses}
        assert states == {0: pb.QUERY_STATE_TIMED_OUT, 1: pb.QUERY_STATE_OK}
        assert [r.title for r in pages[0].results] == ["acme/app · bug one"]


def test_provider_base_url_overrides_parse() -> None:
    assert parse_base_urls(" slack=http://127.0.0.1:9/ ,gmail=https://g.example") == {
        ProviderId.SLACK: "http://127.0.0.1:9",
        ProviderId.GMAIL: "https://g.example",
    }
    for bad in ("nope=https://x", "slack=ftp://x"):
        with pytest.raises(SettingsError):
            parse_base_urls(bad)
