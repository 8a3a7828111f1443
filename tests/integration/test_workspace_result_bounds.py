"""A fused result carries bounded provider text, so a page fits the response limit whatever
the providers send: titles cut at 1000 characters, kind, author and container at 500, and a
URL longer than 8192 characters left out (docs/semantics.md, Fusion)."""

from __future__ import annotations

from pathlib import Path

from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import serving
from tests.support.reliability.world import connect_all, queries_for

pytest_plugins = ["tests.fakes.fixtures"]


async def test_long_provider_fields_are_bounded_in_results(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    fakes.google_drive.add_file("short", "alpha plan", "alpha notes", owner="jane@example.com")
    fakes.google_drive.add_file("f" * 9000, "alpha " + "\u00e9" * 5000, "alpha notes",
                                owner="o" * 2000 + "@example.com", mime="application/" + "x" * 900)
    async with serving(fakes, tmp_path) as client:
        await connect_all(client.accounts, fakes, client.metadata)
        statuses, (page,) = await client.run(pb.SearchWorkspaceRequest(
            queries=queries_for("google_drive", ("alpha",)), top_k=10))
    assert {s.state for s in statuses} == {pb.QUERY_STATE_OK}
    by_title = {r.title[:10]: r for r in page.results}
    short, long = by_title["alpha plan"], by_title["alpha \u00e9\u00e9\u00e9\u00e9"]
    assert short.url.endswith("/short")
    assert short.author == "Jane"
    assert short.kind == "application/vnd.google-apps.document"
    assert len(long.title) == 1000
    assert long.title.endswith("...")
    assert len(long.author) == 500
    assert long.author.endswith("...")
    assert len(long.kind) == 500
    assert long.kind.endswith("...")
    assert long.url == ""  # 9,000 characters of id: no cut link
    assert long.result_id != short.result_id
