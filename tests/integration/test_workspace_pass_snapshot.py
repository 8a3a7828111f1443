"""A list read to its end across two provider pages of one call is read again before it ends.

Between two provider pages, even pages one call reads milliseconds apart, a user deletes an
item: every result after it moves up one place, and the first result of the second page
moves onto the first, which the call already read. The second page then starts one result
late. The list was taken as ended once one call had read it from its first page to its end,
so that result was never emitted, and the last page said the search was complete. Now only a
list that is one provider answer is taken whole; a list read across pages is read again from
its first page (a sweep) before it ends.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import serving
from tests.support.reliability.world import connect_all

pytest_plugins = ["tests.fakes.fixtures"]

MESSAGES = 30  # Gmail lists 20 a page: two pages


async def test_a_result_moved_onto_a_page_already_read_is_still_emitted(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    newest = datetime(2026, 3, 1, tzinfo=UTC)
    for n in range(MESSAGES):  # m0 newest: the list's order
        sent = newest - timedelta(hours=n)
        fakes.gmail.add_message(f"m{n}", f"alpha mail {n}", "alpha", sent=sent)
    # Deleted as the first page is answered: m20 moves onto the first page, the second
    # page (from the 21st place) starts at m21.
    fakes.gmail.delete_after_next_list("m3")
    query = pb.NativeQuery(provider=cpb.PROVIDER_GMAIL, text="alpha")
    emitted: list[str] = []
    async with serving(fakes, tmp_path) as client:
        await connect_all(client.accounts, fakes, metadata=client.metadata)
        token = ""
        for _ in range(10):
            _, (page,) = await client.run(
                pb.SearchWorkspaceRequest(queries=[query], top_k=MESSAGES, page_token=token),
                seconds=30,
            )
            emitted += [r.url.rsplit("/", 1)[-1] for r in page.results]
            token = page.next_page_token
            if not token:
                break
    assert not token
    present = {f"m{n}" for n in range(MESSAGES)} - {"m3"}
    assert "m20" in emitted, "the result that moved onto the page already read was lost"
    assert sorted(emitted) == sorted(present)  # each once
