"""A list that ended on a failure is still reported FAILED on later pages.

A query the provider rejected (or a list given up, or stopped for broken paging) ended
FAILED on its page; every later page of the search then reported it `OK`, "no more
results", and the last status received is the current one, so a caller concluded the query
had completed. A page token now keeps that the list ended on a failure.
"""

from __future__ import annotations

from pathlib import Path

from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import serving
from tests.support.reliability.world import WORDS, connect_all, queries_for, seed

pytest_plugins = ["tests.fakes.fixtures"]


async def test_a_rejected_query_stays_failed_on_the_pages_after(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    seed(fakes, items_per_word=12)
    queries = queries_for("google_drive", WORDS[:1]) + queries_for("jira", WORDS[:1])
    async with serving(fakes, tmp_path) as client:
        ids = await connect_all(client.accounts, fakes, metadata=client.metadata)
        fakes.jira.fail_status(400, times=1)  # JQL the provider rejects: final
        token, states = "", []
        for _ in range(10):
            statuses, (page,) = await client.run(
                pb.SearchWorkspaceRequest(queries=queries, top_k=5, page_token=token), seconds=30
            )
            states += [s.state for s in statuses if s.account_id == ids["jira"]]
            token = page.next_page_token
            if not token:
                break
    assert len(states) > 1
    assert set(states) == {pb.QUERY_STATE_FAILED}
