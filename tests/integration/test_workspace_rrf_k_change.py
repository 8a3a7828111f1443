"""Changing SEARCH_RRF_K does not fail the page tokens callers hold.

The workspace page token was bound to the configured RRF k, so an operator tuning
SEARCH_RRF_K (or replicas with different values during a rolling change) made every token
in flight INVALID_ARGUMENT "token belongs to another request": callers started again and
saw every result again. The token now carries the k its search began with, and its pages
keep it; new searches take the new value.
"""

from __future__ import annotations

from pathlib import Path

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import serving
from tests.support.drive import add_files

pytest_plugins = ["tests.fakes.fixtures"]

DRIVE = cpb.PROVIDER_GOOGLE_DRIVE
FILES = 20
QUERIES = [pb.NativeQuery(provider=DRIVE, text="fullText contains 'alpha'"),
           pb.NativeQuery(provider=DRIVE, text="fullText contains 'plan'")]


async def test_a_search_keeps_its_k_across_a_configuration_change(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    add_files(fakes, FILES)
    async with serving(fakes, tmp_path, env={"SEARCH_RRF_K": "60"}) as client:
        await client.accounts.ConnectAccount(apb.ConnectAccountRequest(
            provider=DRIVE, display_name="drive",
            credentials=apb.Credentials(token=fakes.google_drive.token),
        ), metadata=client.metadata)
        _, (first,) = await client.run(pb.SearchWorkspaceRequest(queries=QUERIES, top_k=5))
        assert first.rrf_k == 60
    seen = [r.result_id for r in first.results]
    async with serving(fakes, tmp_path, env={"SEARCH_RRF_K": "5"}) as client:
        token = first.next_page_token
        while token:
            _, (page,) = await client.run(pb.SearchWorkspaceRequest(
                queries=QUERIES, top_k=5, page_token=token), seconds=30)
            assert page.rrf_k == 60, "a search keeps the k it began with"
            seen += [r.result_id for r in page.results]
            token = page.next_page_token
        _, (fresh,) = await client.run(pb.SearchWorkspaceRequest(queries=QUERIES, top_k=5))
        assert fresh.rrf_k == 5
    assert sorted(seen) == sorted(set(seen))
    assert len(seen) == FILES
