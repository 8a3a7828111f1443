"""A provider whose paging never ends.

Providers have paged wrongly: a cursor that leads back to an earlier page, or empty pages
that each carry a fresh cursor. A list whose cursor repeated itself was caught; any other
such list kept the search's pages coming forever, each call spending its request budget on
the provider for nothing, and a caller reading "until there is no token" never stopped. Now
a list that read 50 provider pages in a row, in its first pass, without contributing a
result ends, FAILED, saying why; the other queries go on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from service.workspace.lists import MAX_IDLE_PAGES
from tests.integration.test_workspace_grpc import serving
from tests.support.reliability.world import WORDS, connect_all, queries_for, seed

pytest_plugins = ["tests.fakes.fixtures"]

ITEMS = 30  # Slack pages 20 at a time: two pages, so "cycle" is a cycle of two


@pytest.mark.parametrize("runaway", ["empty", "cycle"])
async def test_a_list_whose_paging_never_ends_is_stopped_and_the_search_ends(
    fakes: FakeProviders, tmp_path: Path, runaway: str
) -> None:
    seed(fakes, items_per_word=ITEMS)
    fakes.slack.runaway = runaway
    queries = queries_for("slack", WORDS[:1]) + queries_for("google_drive", WORDS[:1])
    seen: list[str] = []
    said = False
    async with serving(fakes, tmp_path) as client:
        ids = await connect_all(client.accounts, fakes, metadata=client.metadata)
        token = ""
        for _ in range(MAX_IDLE_PAGES):
            statuses, (page,) = await client.run(
                pb.SearchWorkspaceRequest(queries=queries, top_k=5, page_token=token),
                seconds=30,
            )
            seen += [r.result_id for r in page.results]
            said |= any("pages in a row with nothing new" in s.message for s in statuses)
            token = page.next_page_token
            if not token:
                break
        assert not token, "the pages never ended"
    last = {s.account_id: s for s in statuses}
    assert said
    # Later pages still say it failed, not "no more results".
    assert last[ids["slack"]].state == pb.QUERY_STATE_FAILED
    assert last[ids["google_drive"]].state == pb.QUERY_STATE_OK
    assert len(seen) == len(set(seen)) == 2 * ITEMS
    # Bounded: the pages of calls in which it still contributed, then MAX_IDLE_PAGES more.
    assert fakes.slack.requests["/api/assistant.search.context"] < 4 * MAX_IDLE_PAGES
