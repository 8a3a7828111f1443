"""A search over many accounts pages to its end, like a search over one.

A page token carries every (query, account) list's resume point, each with the provider's own
page token (Drive's, Calendar's, Gmail's and Jira's run to 100-250 characters). The token was
capped at 16 KiB and, when the lists alone did not fit, was left empty: the page said nothing
was left. 40 Drive accounts with four queries each (160 lists) ended after the first page with
most results never returned. Now the lists always travel (emitted ids still fit in 16 KiB
beside them) and every result comes back exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from search_client.pb.search.v1 import accounts_pb2
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import serving
from tests.support.drive import add_files
from tests.support.reliability.world import PROVIDERS, queries_for

pytest_plugins = ["tests.fakes.fixtures"]

WORDS = ("alpha", "beta", "gamma", "delta")
FILES = 24  # per word


@pytest.mark.parametrize("delivery", [pb.STATUS_DELIVERY_IN_PAGE, pb.STATUS_DELIVERY_STREAMED])
async def test_forty_accounts_page_to_the_end(
    fakes: FakeProviders, tmp_path: Path, delivery: pb.StatusDelivery
) -> None:
    add_files(fakes, FILES, WORDS)
    async with serving(fakes, tmp_path) as client:
        for index in range(40):
            await client.accounts.ConnectAccount(accounts_pb2.ConnectAccountRequest(
                provider=PROVIDERS["google_drive"], display_name=f"drive {index}",
                credentials=accounts_pb2.Credentials(token=fakes.google_drive.token),
            ), metadata=client.metadata)
        queries = queries_for("google_drive", WORDS)
        seen: list[str] = []
        token, pages = "", 0
        while True:
            statuses, (page,) = await client.run(pb.SearchWorkspaceRequest(
                queries=queries, top_k=10, page_token=token, status_delivery=delivery),
                seconds=60)
            pages += 1
            every = [*statuses, *page.statuses]
            assert len(every) == 160
            assert {s.state for s in every} == {pb.QUERY_STATE_OK}
            seen += [r.url for r in page.results]
            if not page.next_page_token:
                break
            token = page.next_page_token
            assert pages < 30, "paging does not end"
    assert len(seen) == len(set(seen)), "a result came back twice"
    assert len(seen) == len(WORDS) * FILES, "results were lost"
