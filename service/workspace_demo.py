"""`python -m service demo --workspace`: fake providers, a real server, one fused search.

Everything runs in this process on loopback: the fake Slack, GitHub, Jira and Gmail APIs of
`service.fakes` (real HTTP, each provider's wire format) seeded with one incident, and the
service built by its own composition root with its defaults in a temporary data directory.
Accounts are connected and searched through the gRPC API over a real channel.
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import grpc

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import accounts_pb2_grpc as apb_grpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as pb_grpc
from service.cli_client import describe_rpc_error
from service.fakes.story import REPO, seed_incident
from service.fakes.suite import FakeProviders
from service.settings import Settings
from service.workspace.model import ProviderId

PROVIDERS = (cpb.PROVIDER_SLACK, cpb.PROVIDER_GITHUB, cpb.PROVIDER_JIRA, cpb.PROVIDER_GMAIL)
QUERIES = (
    pb.NativeQuery(provider=cpb.PROVIDER_SLACK, text="checkout timeout"),
    pb.NativeQuery(provider=cpb.PROVIDER_SLACK, text="INC-142"),
    pb.NativeQuery(provider=cpb.PROVIDER_GITHUB, kind=pb.QUERY_KIND_ISSUES,
                   text=f"checkout timeout repo:{REPO}"),
    pb.NativeQuery(provider=cpb.PROVIDER_GITHUB, kind=pb.QUERY_KIND_CODE,
                   text=f"checkout timeout repo:{REPO}"),
    pb.NativeQuery(provider=cpb.PROVIDER_JIRA,
                   text='text ~ "checkout timeout" ORDER BY updated DESC'),
    pb.NativeQuery(provider=cpb.PROVIDER_GMAIL, text="checkout timeout"),
)
TOP_K = 5
CALL_TIMEOUT = 30.0


def provider_name(provider: int) -> str:
    """`slack` for PROVIDER_SLACK."""
    return cpb.Provider.Name(provider).removeprefix("PROVIDER_").lower()


def demo_settings(fakes: FakeProviders, data_dir: Path) -> Settings:
    """The service's defaults, on a free loopback port, with providers pointed at the fakes."""
    return Settings.from_mapping(
        {
            "SEARCH_HOST": "127.0.0.1",
            "SEARCH_PORT": "0",
            "SEARCH_DATA_DIR": str(data_dir),
            # Workspace search embeds nothing: do not load the local model.
            "SEARCH_EMBEDDER": "none",
            # The fakes speak plain http on loopback; only tests and this demo allow it.
            "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true",
            "SEARCH_PROVIDER_BASE_URLS": fakes.base_urls(),
            "SEARCH_GRACE_PERIOD": "0",
        }
    )


async def run_workspace_demo(out: TextIO = sys.stdout) -> int:
    """Run the demo, printing to `out`; returns the exit code."""
    fakes = FakeProviders.create()
    await fakes.start()
    try:
        seed_incident(fakes)
        with tempfile.TemporaryDirectory(prefix="search-demo-") as data_dir:
            return await _serve_and_search(fakes, Path(data_dir), out)
    finally:
        await fakes.stop()


async def _serve_and_search(fakes: FakeProviders, data_dir: Path, out: TextIO) -> int:
    from service.server import build_app  # the composition root, only when the demo runs

    app = await build_app(demo_settings(fakes, data_dir))
    await app.start()
    try:
        async with grpc.aio.insecure_channel(app.address) as channel:
            print(
                "Fake Slack, GitHub, Jira and Gmail APIs on loopback (real HTTP), seeded with "
                f"incident INC-142;\nthe search service on {app.address} (its defaults, SQLite "
                "in a temporary directory).",
                file=out,
            )
            try:
                await _connect(apb_grpc.AccountServiceStub(channel), fakes, out)
                await _search(pb_grpc.WorkspaceSearchServiceStub(channel), out)
            except grpc.aio.AioRpcError as error:
                print(f"error: {describe_rpc_error(error)}", file=sys.stderr)
                return 1
    finally:
        await app.stop(0)
    return 0


async def _connect(
    accounts: apb_grpc.AccountServiceAsyncStub, fakes: FakeProviders, out: TextIO
) -> None:
    print("\nAccountService/ConnectAccount (the fakes' tokens):", file=out)
    for provider in PROVIDERS:
        token = fakes.of(ProviderId(provider_name(provider))).token
        request = apb.ConnectAccountRequest(
            provider=provider, display_name=f"acme {provider_name(provider)}",
            credentials=apb.Credentials(token=token),
        )
        reply = await accounts.ConnectAccount(request, timeout=CALL_TIMEOUT)
        account = reply.account
        state = pb.AccountState.Name(account.state).removeprefix("ACCOUNT_STATE_")
        print(f"  {provider_name(provider):<7} {account.account_id}  {state}", file=out)


async def _search(search: pb_grpc.WorkspaceSearchServiceAsyncStub, out: TextIO) -> None:
    print(f"\nWorkspaceSearchService/SearchWorkspace, top_k {TOP_K}:", file=out)
    for index, query in enumerate(QUERIES):
        kind = pb.QueryKind.Name(query.kind).removeprefix("QUERY_KIND_") if query.kind else ""
        print(f"  [{index}] {provider_name(query.provider):<7} {kind:<7} {query.text}", file=out)
    statuses, page = await _run(search, pb.SearchWorkspaceRequest(queries=QUERIES, top_k=TOP_K))
    print_page(statuses, page, out)
    print("\nQuery cards (how to write each provider's native query):", file=out)
    for card in page.cards:
        print(f"  {provider_name(card.provider)}: {_short(card.syntax, 88)}", file=out)
        print(f"    example: {card.example}", file=out)
    if not page.next_page_token:
        return
    print(f"\nSecond page: the same queries with page_token {page.next_page_token[:16]}...",
          file=out)
    request = pb.SearchWorkspaceRequest(
        queries=QUERIES, top_k=TOP_K, page_token=page.next_page_token
    )
    statuses, page = await _run(search, request)
    print_page(statuses, page, out)


async def _run(
    search: pb_grpc.WorkspaceSearchServiceAsyncStub, request: pb.SearchWorkspaceRequest
) -> tuple[list[pb.QueryStatus], pb.FusedPage]:
    """The statuses and the one page a call streams."""
    statuses: list[pb.QueryStatus] = []
    page = pb.FusedPage()
    async for message in search.SearchWorkspace(request, timeout=CALL_TIMEOUT):
        if message.HasField("page"):
            page = message.page
        else:
            statuses.append(message.query_status)
    return statuses, page


def print_page(statuses: Sequence[pb.QueryStatus], page: pb.FusedPage, out: TextIO) -> None:
    """Query statuses, then the fused results with their contributions."""
    print("\n  Query statuses (streamed before the page):", file=out)
    for status in sorted(statuses, key=lambda s: s.query_index):
        state = pb.QueryState.Name(status.state).removeprefix("QUERY_STATE_")
        total = f" of {status.total} matches" if status.total else ""
        note = f" - {status.message}" if status.message else ""
        print(
            f"    [{status.query_index}] {provider_name(status.provider):<7} {state:<7} "
            f"{status.result_count} shown so far{total}{note}",
            file=out,
        )
    exact = "exact" if page.ranking_is_exact else "not exact"
    print(
        f"\n  Fused page {page.page_number} (RRF, k={page.rrf_k}: score = sum of "
        f"1/(k + rank) over the queries; ranking {exact}):",
        file=out,
    )
    first_rank = (page.page_number - 1) * TOP_K + 1
    for rank, result in enumerate(page.results, start=first_rank):
        print(
            f"  {rank:>3}. {result.score:.4f}  {provider_name(result.provider):<7} "
            f"{result.kind:<12} {_short(result.title, 64)}",
            file=out,
        )
        parts = [f"[{c.query_index}] rank {c.rank} ({c.score:.4f})" for c in result.contributions]
        print(f"         {_short(result.snippet, 80)}", file=out)
        print(f"         {result.url}", file=out)
        print(f"         from query {' + '.join(parts)}", file=out)
    more = "yes" if page.next_page_token else "no"
    print(f"  next page: {more}", file=out)


def _short(text: str, width: int) -> str:
    return textwrap.shorten(" ".join(text.split()), width, placeholder="...")
