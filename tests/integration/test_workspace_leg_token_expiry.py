"""One fan-out leg's page token expiring alone.

Calendar over several calendars and Jira or Confluence over several sites keep a page token
per leg. A leg that failed on an earlier page holds an older token than the others, so it
can expire alone. The provider then refused it (400) and that leg was dropped, the page
`partial` with "calendar ops failed: ... (HTTP 400)" and its ranking inexact; its remaining
results came only late, from the sweep that rereads a list from its first page, and not at
all when the expiry hit a sweep that was itself continuing from a token. Now a leg whose
token the provider refuses, when the list resumed the call with it, reads its first page
again at once; what was emitted is skipped by identity.
"""

from __future__ import annotations

from pathlib import Path

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import Client, serving

pytest_plugins = ["tests.fakes.fixtures"]

EVENTS = 30  # per calendar: three provider pages of ten


async def test_a_calendar_whose_token_expired_alone_is_read_again_not_dropped(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    calendar = fakes.google_calendar
    for name in ("team", "ops"):
        calendar.add_calendar(name)
        for i in range(EVENTS):
            calendar.add_event(name, f"{name}{i}", f"review {name} {i}",
                               start=f"2024-03-{1 + i % 28:02d}T{10 + i // 28}:00:00Z",
                               end=f"2024-03-{1 + i % 28:02d}T{11 + i // 28}:00:00Z")
    query = pb.NativeQuery(provider=cpb.PROVIDER_GOOGLE_CALENDAR, text="review")
    seen: list[str] = []
    messages: list[str] = []
    async with serving(fakes, tmp_path) as client:
        await client.accounts.ConnectAccount(
            _connect(calendar.token), metadata=client.metadata
        )
        token = ""
        for number in range(1, 40):
            if number % 3 == 0:
                calendar.expire_calendar_tokens("ops")  # ops' tokens age out, team's do not
            statuses, page = await _page(client, query, token)
            messages += [s.message for s in statuses]
            for status in statuses:  # not "calendar ops failed: ... (HTTP 400)", partial
                assert status.state == pb.QUERY_STATE_OK, status.message
                assert not status.partial, status.message
            seen += [r.result_id for r in page.results]
            token = page.next_page_token
            if not token:
                break
    assert len(seen) == len(set(seen)) == 2 * EVENTS
    assert any("a part of this query" in m for m in messages)


def _connect(token: str) -> apb.ConnectAccountRequest:
    return apb.ConnectAccountRequest(provider=cpb.PROVIDER_GOOGLE_CALENDAR, display_name="cal",
                                     credentials=apb.Credentials(token=token))


async def _page(
    client: Client, query: pb.NativeQuery, token: str
) -> tuple[list[pb.QueryStatus], pb.FusedPage]:
    statuses, (page,) = await client.run(
        pb.SearchWorkspaceRequest(queries=[query], top_k=5, page_token=token), seconds=30
    )
    return statuses, page
