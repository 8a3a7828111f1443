"""Hostile provider numbers never reach protobuf raw (issue 17, item 6), through the real server.

A provider's `Retry-After: inf` (or 1e20, 1e400, NaN, a date in the year 9999), a
`total_count` past int64 or below zero, and an item dated before year 1 in UTC used to end
the whole SearchWorkspace call INTERNAL (OverflowError / "Value out of range") or fail the
item's query. Now waits are clamped to a day, counts to [0, 2**63 - 1] (a clamped count is
not exact), and an unusable date is left unset: the healthy queries keep their results.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import SEARCH_PATH, q, serving

GITHUB = cpb.PROVIDER_GITHUB
INT64_MAX = 2**63 - 1
MAX_RETRY_AFTER = 86_400.0  # service.workspace.statuses: a provider wait is at most a day


def _final(statuses: list[pb.QueryStatus], provider: int) -> pb.QueryStatus:
    return [s for s in statuses if s.provider == provider][-1]


@pytest.mark.parametrize(
    "wait", ["inf", "1e20", "1e400", "nan", "-5", "Fri, 31 Dec 9999 23:59:59 GMT"]
)
async def test_a_hostile_retry_after_is_clamped_and_other_queries_keep_their_results(
    fakes: FakeProviders, tmp_path: Path, wait: str
) -> None:
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        await client.connect(fakes, GITHUB)
        fakes.github.add_repo("acme/api")
        fakes.github.add_issue("acme/api", 7, "Deploy freeze on Fridays", "no deploys")
        fakes.slack.fault("status", status=429, headers={"Retry-After": wait}, path=SEARCH_PATH)
        statuses, pages = await client.run(pb.SearchWorkspaceRequest(queries=[
            q("deploy"), q("deploy", provider=GITHUB, kind=pb.QUERY_KIND_ISSUES)]))
    slack = _final(statuses, cpb.PROVIDER_SLACK)
    assert slack.state == pb.QUERY_STATE_RATE_LIMITED
    assert 0 <= slack.retry_after.ToTimedelta().total_seconds() <= MAX_RETRY_AFTER
    assert _final(statuses, GITHUB).state == pb.QUERY_STATE_OK
    titles = [r.title for page in pages for r in page.results]
    assert titles == ["acme/api · Deploy freeze on Fridays"]


@pytest.mark.parametrize(("total", "shown"), [(2**70, INT64_MAX), (-3, 0)])
async def test_a_provider_total_outside_int64_is_clamped_and_not_exact(
    fakes: FakeProviders, tmp_path: Path, total: int, shown: int
) -> None:
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes, GITHUB)
        fakes.github.add_repo("acme/api")
        fakes.github.answer({"total_count": total, "incomplete_results": False, "items": []},
                            path="/search/issues")
        statuses, _ = await client.run(pb.SearchWorkspaceRequest(queries=[
            q("deploy", provider=GITHUB, kind=pb.QUERY_KIND_ISSUES)]))
    final = _final(statuses, GITHUB)
    assert final.state == pb.QUERY_STATE_OK
    assert final.total == shown
    assert not final.total_is_exact


async def test_an_item_dated_before_year_one_in_utc_keeps_its_query(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes, GITHUB)
        fakes.github.add_repo("acme/api")
        fakes.github.add_issue("acme/api", 7, "Deploy freeze",
                               updated_at="0001-01-01T00:00:00+01:00")
        fakes.github.add_issue("acme/api", 8, "Deploy window")
        statuses, pages = await client.run(pb.SearchWorkspaceRequest(queries=[
            q("deploy", provider=GITHUB, kind=pb.QUERY_KIND_ISSUES)]))
    assert _final(statuses, GITHUB).state == pb.QUERY_STATE_OK
    results = {r.title.split(" · ")[-1]: r for page in pages for r in page.results}
    assert set(results) == {"Deploy freeze", "Deploy window"}
    assert not results["Deploy freeze"].HasField("update_time")  # unusable: left unset
    assert results["Deploy window"].HasField("update_time")
