"""More accounts than a call's deadline can read: every account gets its turn.

The fan-out reads at most SEARCH_ACCOUNT_CONCURRENCY accounts at once. When a tenant has more
accounts than the caller's deadline lets through, the accounts read last were cut by the
deadline, and the next page read them last again: here 12 of 24 Drive accounts came back
TIMED_OUT on every page ("provider search timed out; narrow the query", which no query could
fix) until the others ran out of results, so their results waited behind every page of the
others'. Now a page token counts, per list, the consecutive pages the deadline left it unread
(`behind`); the next page reads the accounts furthest behind first, and the status says what
happened.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from search_client import AsyncSearchClient, RetryPolicy
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as pb_grpc
from service.fakes.suite import FakeProviders
from tests.support.drive import add_files, connect_accounts
from tests.support.reliability.world import queries_for
from tests.support.server import channel_to, running_server

pytest_plugins = ["tests.fakes.fixtures"]

ACCOUNTS = 24
FILES = 80
PAGES = 6
ENV = {
    "SEARCH_ALLOW_PRIVATE_BASE_URLS": "true",
    "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true",
    "SEARCH_ACCOUNT_CONCURRENCY": "4",
}


async def test_accounts_the_deadline_left_unread_go_first_on_the_next_page(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    add_files(fakes, FILES)
    env = {**ENV, "SEARCH_PROVIDER_BASE_URLS": f"google_drive={fakes.google_drive.base_url}"}
    async with running_server(tmp_path, env=env) as app:
        async with AsyncSearchClient(
            f"127.0.0.1:{app.port}", retry=RetryPolicy(max_attempts=1)
        ) as client:
            await connect_accounts(client, fakes, ACCOUNTS)
        fakes.google_drive.slow(0.3)  # 4 accounts at a time: ~3 waves fit in the deadline
        read: Counter[str] = Counter()
        late_turns = 0  # statuses saying the deadline came before the account's turn
        unread_runs: Counter[str] = Counter()  # current run of pages left unread, by account
        longest = 0
        async with channel_to(app) as channel:
            stub = pb_grpc.WorkspaceSearchServiceStub(channel)
            token = ""
            for _ in range(PAGES):
                page = pb.FusedPage()
                async for message in stub.SearchWorkspace(pb.SearchWorkspaceRequest(
                    queries=queries_for("google_drive", ("alpha",)), top_k=10, page_token=token,
                ), timeout=1.3):
                    if message.HasField("page"):
                        page = message.page
                        continue
                    status = message.query_status
                    if status.state == pb.QUERY_STATE_OK:
                        read[status.account_id] += 1
                        unread_runs[status.account_id] = 0
                    else:
                        # (on a loaded machine a first-wave read may run out half the
                        # call's time: the provider's fault then, still TIMED_OUT)
                        assert status.state == pb.QUERY_STATE_TIMED_OUT, status
                        late_turns += "goes ahead of the others" in status.message
                        unread_runs[status.account_id] += 1
                        longest = max(longest, unread_runs[status.account_id])
                assert page.next_page_token
                token = page.next_page_token
    assert late_turns
    assert len(read) == ACCOUNTS, f"{ACCOUNTS - len(read)} accounts never read in {PAGES} pages"
    assert longest < PAGES // 2, read
