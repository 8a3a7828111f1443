"""A search begun from a per-query `next_cursor`, then paged by its page token.

A cursor remembers its query's results emitted so far (the last 200), and a page token keeps
the ids of the fused results its own search emitted, but no list's own ids. So a search
begun from a cursor forgot, from its second page on, what the cursor remembered: the results
of the first search came back again. Now such a search starts with the cursor's ids as
emitted, and its page tokens carry them on.
"""

from __future__ import annotations

from pathlib import Path

from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import Client, q, serving

pytest_plugins = ["tests.fakes.fixtures"]

MESSAGES = 30


async def _page(
    client: Client, query: pb.NativeQuery, top_k: int, token: str = ""
) -> tuple[pb.QueryStatus, pb.FusedPage]:
    statuses, (page,) = await client.run(
        pb.SearchWorkspaceRequest(queries=[query], top_k=top_k, page_token=token), seconds=30
    )
    return statuses[-1], page


async def test_a_search_begun_from_a_cursor_never_repeats_what_the_cursor_remembered(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    for i in range(MESSAGES):
        fakes.slack.add_message("C1", "general", f"{1000 + i}.000000", f"alpha {i}")
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        status, page = await _page(client, q("alpha"), 5)
        first = [r.result_id for r in page.results]
        assert len(first) == 5
        assert status.next_cursor

        resumed = q("alpha", cursor=status.next_cursor)
        seen: list[str] = []
        token = ""
        for _ in range(MESSAGES):
            _, page = await _page(client, resumed, 2, token)
            seen += [r.result_id for r in page.results]
            token = page.next_page_token
            if not token:
                break
    assert not set(first) & set(seen), "the cursor's results came back"
    assert len(seen) == len(set(seen)) == MESSAGES - len(first)
