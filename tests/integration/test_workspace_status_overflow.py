"""An IN_PAGE page whose statuses would not fit the response limit sends them before it.

With `status_delivery = IN_PAGE` every (query, account) status of a page travelled inside the
page. Each status carries its `next_cursor` (the provider's page token and the query's last
emitted ids, up to ~4,000 characters), so a search over enough accounts made the page larger
than the response limit (4 MiB by default, ~1,000 lists; here 160 lists under a 96 KiB
limit). The server refused the page with RESPONSE_TOO_LARGE, and refused it again for the
same token: the caller could never read on. Now the earliest statuses that do not fit come
before the page as `query_status` messages, as STREAMED sends them, the latest stay in the
page, and every page fits.
"""

from __future__ import annotations

from pathlib import Path

from search_client import AsyncSearchClient, NativeQuery, Provider, QueryState, RetryPolicy
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as pb_grpc
from service.fakes.suite import FakeProviders
from tests.support.drive import add_files, connect_accounts
from tests.support.reliability.world import queries_for
from tests.support.server import channel_to, running_server

pytest_plugins = ["tests.fakes.fixtures"]

LIMIT = 96 * 1024
ENV = {
    "SEARCH_ALLOW_PRIVATE_BASE_URLS": "true",
    "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true",
    "SEARCH_MAX_RESPONSE_BYTES": str(LIMIT),
}
WORDS = ("alpha", "beta", "gamma", "delta")
FILES = 24  # per word
ACCOUNTS = 40
LISTS = ACCOUNTS * len(WORDS)


def _env(fakes: FakeProviders) -> dict[str, str]:
    return {**ENV, "SEARCH_PROVIDER_BASE_URLS": f"google_drive={fakes.google_drive.base_url}"}


def _seed(fakes: FakeProviders) -> None:
    add_files(fakes, FILES, WORDS)


async def test_statuses_that_do_not_fit_come_before_the_page(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed(fakes)
    async with running_server(tmp_path, env=_env(fakes)) as app:
        async with AsyncSearchClient(
            f"127.0.0.1:{app.port}", retry=RetryPolicy(max_attempts=1)
        ) as client:
            await connect_accounts(client, fakes, ACCOUNTS)
        queries = queries_for("google_drive", WORDS)
        async with channel_to(app) as channel:
            stub = pb_grpc.WorkspaceSearchServiceStub(channel)
            seen: list[str] = []
            token, pages, spilled = "", 0, 0
            while True:
                streamed: list[pb.QueryStatus] = []
                page = pb.FusedPage()
                async for message in stub.SearchWorkspace(pb.SearchWorkspaceRequest(
                    queries=queries, top_k=10, page_token=token,
                    status_delivery=pb.STATUS_DELIVERY_IN_PAGE,
                ), timeout=60):
                    assert message.ByteSize() <= LIMIT
                    if message.HasField("page"):
                        page = message.page
                    else:
                        streamed.append(message.query_status)
                pages += 1
                spilled += bool(streamed)
                every = [*streamed, *page.statuses]
                assert len(every) == LISTS
                assert len({(s.query_index, s.account_id) for s in every}) == LISTS
                assert {s.state for s in every} == {pb.QUERY_STATE_OK}
                assert {s.page_number for s in every} == {page.page_number}
                assert page.statuses, "the latest statuses travel in the page"
                seen += [r.url for r in page.results]
                if not page.next_page_token:
                    break
                token = page.next_page_token
                assert pages < 30, "paging does not end"
    assert spilled, "the statuses never outgrew a page: the test no longer tries the limit"
    assert len(seen) == len(set(seen)), "a result came back twice"
    assert len(seen) == len(WORDS) * FILES, "results were lost"


async def test_the_client_reads_every_page_and_status(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed(fakes)
    async with (
        running_server(tmp_path, env=_env(fakes)) as app,
        AsyncSearchClient(f"127.0.0.1:{app.port}", retry=RetryPolicy(max_attempts=1)) as client,
    ):
        await connect_accounts(client, fakes, ACCOUNTS)
        queries = [NativeQuery(Provider.GOOGLE_DRIVE, q.text) for q in queries_for(
            "google_drive", WORDS)]
        seen: list[str] = []
        async for page in client.iter_workspace_pages(queries, top_k=10, timeout=60):
            assert len(page.statuses) == LISTS
            assert {s.state for s in page.statuses} == {QueryState.OK}
            seen += [r.url for r in page.results]
            assert len(seen) <= len(WORDS) * FILES
    assert sorted(seen) == sorted(set(seen))
    assert len(seen) == len(WORDS) * FILES
