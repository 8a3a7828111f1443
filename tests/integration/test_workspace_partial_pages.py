"""Provider pages shorter than asked for, or empty before the end.

Drive documents `pageSize` as a maximum: "partial or empty result pages are possible even
before the end of the files list has been reached". A short page must not shift the
list's ranks or resume points, and an empty page that carries a `nextPageToken` is not the
end. The fake Drive serves both (`page_cap`, `blank_at`); every file comes back once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import serving

pytest_plugins = ["tests.fakes.fixtures"]

DRIVE = cpb.PROVIDER_GOOGLE_DRIVE
FILES = 30


@pytest.mark.parametrize(("cap", "blank"), [(3, set()), (0, {0, 10, 20}), (1, set(range(12)))])
async def test_short_and_empty_pages_lose_and_repeat_nothing(
    fakes: FakeProviders, tmp_path: Path, cap: int, blank: set[int]
) -> None:
    for n in range(FILES):
        fakes.google_drive.add_file(f"f-{n}", f"alpha plan {n}", f"alpha notes {n}",
                                    modified=f"2026-05-{1 + n % 28:02d}T{n % 24:02d}:00:00Z")
    fakes.google_drive.page_cap = cap
    fakes.google_drive.blank_at = blank
    async with serving(fakes, tmp_path) as client:
        await client.accounts.ConnectAccount(apb.ConnectAccountRequest(
            provider=DRIVE, display_name="drive",
            credentials=apb.Credentials(token=fakes.google_drive.token),
        ), metadata=client.metadata)
        seen: list[str] = []
        token, pages = "", 0
        while True:
            statuses, (page,) = await client.run(pb.SearchWorkspaceRequest(
                queries=[pb.NativeQuery(provider=DRIVE, text="fullText contains 'alpha'")],
                top_k=5, page_token=token), seconds=30)
            pages += 1
            assert {s.state for s in statuses} == {pb.QUERY_STATE_OK}
            seen += [r.result_id for r in page.results]
            if not page.next_page_token:
                break
            token = page.next_page_token
            assert pages < 20, "paging does not end"
    assert len(seen) == len(set(seen)), "a result came back twice"
    assert len(seen) == FILES, "results were lost"
