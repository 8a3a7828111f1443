"""Kept-alive provider connections that the provider closed as a request went out.

HTTP/1.1 lets a server close an idle connection at any time, and providers' front ends do
(Node's default idle timeout is 5 s, load balancers' tens of seconds). A request sent on a
pooled connection just as the server closed it is never read: the connection ends before a
byte of the answer. The client treated that like a provider that could not be reached, so a
search paged after such a close came back `partial`, "could not reach provider", its ranking
inexact, and the failure counted toward giving the list up, though the provider was fine.
Now such a request goes once more on a new connection (the budget counts it once).
"""

from __future__ import annotations

from pathlib import Path

from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import Client, serving
from tests.support.reliability.world import PROVIDERS, WORDS, connect_all, queries_for, seed

pytest_plugins = ["tests.fakes.fixtures"]


async def _all_pages(client: Client, queries: list[pb.NativeQuery]) -> list[str]:
    """Every result id of the search, paged to the end; every status on every page OK."""
    seen: list[str] = []
    token = ""
    for _ in range(40):
        statuses, (page,) = await client.run(
            pb.SearchWorkspaceRequest(queries=queries, top_k=10, page_token=token), seconds=30
        )
        for status in statuses:
            assert status.state == pb.QUERY_STATE_OK, status.message
            assert not status.partial, status.message
        assert page.ranking_is_exact
        seen += [r.result_id for r in page.results]
        token = page.next_page_token
        if not token:
            return seen
    raise AssertionError("the search did not end in 40 pages")


async def test_a_request_on_a_connection_the_provider_closed_is_sent_again(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    seed(fakes, items_per_word=12)
    queries = [query for provider in PROVIDERS for query in queries_for(provider, WORDS[:1])]
    async with serving(fakes, tmp_path) as client:
        await connect_all(client.accounts, fakes, metadata=client.metadata)
        expected = await _all_pages(client, queries)
        closes = [fake.close_kept_alive() for fake in fakes.all()]
        seen = await _all_pages(client, queries)
    assert all(close.calls for close in closes), "every provider closed a kept-alive connection"
    assert len(seen) == len(set(seen))
    assert sorted(seen) == sorted(expected)
