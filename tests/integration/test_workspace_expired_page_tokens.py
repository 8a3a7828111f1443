"""Provider page tokens that expire while a search is paged.

A workspace page token keeps each list's provider page token (Slack's cursor, Drive's, Gmail's
and Calendar's `pageToken`, Jira's `nextPageToken`, Confluence's `cursor`). Providers expire
them: Jira's after 7 days, the others sooner, and a caller may page on long after. The fakes
never expired theirs; the live APIs answer `invalid_cursor` (Slack) or 400. The list then
ended FAILED ("provider rejected this query ... check native syntax/scope"): with 40 matching
items and 5 a page, 20 came back and paging ended without a word about the other 20. Now the
list is read again from its first page; what was already returned is skipped by identity, so
every item still comes back exactly once, and the status says the token had expired.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from service.workspace.model import ProviderId
from tests.integration.test_workspace_grpc import Client, serving
from tests.support.reliability.world import WORDS, connect_all, queries_for, seed

pytest_plugins = ["tests.fakes.fixtures"]

ITEMS = 40
CURSOR_PROVIDERS = ("slack", "google_drive", "gmail", "google_calendar", "jira", "confluence")


async def _page(
    client: Client, queries: list[pb.NativeQuery], token: str
) -> tuple[list[pb.QueryStatus], pb.FusedPage]:
    statuses, (page,) = await client.run(
        pb.SearchWorkspaceRequest(queries=queries, top_k=5, page_token=token), seconds=30
    )
    return statuses, page


@pytest.mark.parametrize("provider", CURSOR_PROVIDERS)
async def test_every_item_comes_back_once_although_every_page_token_expired(
    fakes: FakeProviders, tmp_path: Path, provider: str
) -> None:
    seed(fakes, items_per_word=ITEMS)
    fake = fakes.of(ProviderId(provider))
    async with serving(fakes, tmp_path) as client:
        await connect_all(client.accounts, fakes, metadata=client.metadata)
        queries = queries_for(provider, WORDS[:1])
        statuses, page = await _page(client, queries, "")
        seen = [r.result_id for r in page.results]
        token, expired_said = page.next_page_token, False
        while token:
            fake.expire_page_tokens()  # the caller came back after the provider's tokens expired
            statuses, page = await _page(client, queries, token)
            for status in statuses:
                assert status.state == pb.QUERY_STATE_OK, status.message
                expired_said |= "no longer accepted the page token" in status.message
            seen += [r.result_id for r in page.results]
            token = page.next_page_token
    assert expired_said
    assert len(seen) == len(set(seen)) == ITEMS


async def test_a_query_cursor_outlives_its_expired_provider_token(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    seed(fakes, items_per_word=ITEMS)
    async with serving(fakes, tmp_path) as client:
        await connect_all(client.accounts, fakes, metadata=client.metadata)
        (query,) = queries_for("slack", WORDS[:1])
        seen: list[str] = []
        for _ in range(ITEMS):
            statuses, page = await _page(client, [query], "")
            seen += [r.result_id for r in page.results]
            (status,) = statuses
            assert status.state == pb.QUERY_STATE_OK, status.message
            if not status.next_cursor:
                break
            query = pb.NativeQuery(provider=query.provider, text=query.text,
                                   cursor=status.next_cursor)
            fakes.slack.expire_page_tokens()
    assert len(seen) == len(set(seen)) == ITEMS
