"""Workspace paging through the real server and channel against providers that do not hold
still: items deleted between pages, single requests failing, accounts seeing the same item,
and the statuses a caller reads (issue 14, items 1, 2, 4 and 7)."""

from __future__ import annotations

from pathlib import Path

from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import Client, q, serving

pytest_plugins = ["tests.fakes.fixtures"]

GITHUB = cpb.PROVIDER_GITHUB
SLACK = cpb.PROVIDER_SLACK
REPO = "acme/app"


async def _page_all(
    client: Client, queries: list[pb.NativeQuery], top_k: int, *, between: object = None,
    limit: int = 60,
) -> tuple[list[str], list[pb.FusedPage], list[list[pb.QueryStatus]]]:
    """Follow page tokens to the end, one call per page; `between(n)` runs after page n."""
    urls: list[str] = []
    pages: list[pb.FusedPage] = []
    statuses: list[list[pb.QueryStatus]] = []
    token = ""
    for number in range(1, limit + 1):
        request = pb.SearchWorkspaceRequest(queries=queries, top_k=top_k, page_token=token)
        streamed, (page,) = await client.run(request)
        pages.append(page)
        statuses.append(streamed)
        urls.extend(r.url for r in page.results)
        token = page.next_page_token
        if not token:
            return urls, pages, statuses
        if callable(between):
            between(number)
    raise AssertionError(f"paging did not end within {limit} pages")


def _seed_slack(fakes: FakeProviders, count: int) -> None:
    for n in range(count):
        fakes.slack.add_message("C1", "general", f"{1_700_000_000 + n}.000100", f"deploy {n}")


def _seed_github(fakes: FakeProviders, count: int) -> None:
    fakes.github.add_repo(REPO)
    for n in range(count):
        fakes.github.add_issue(REPO, n + 1, f"deploy issue {n}")
        fakes.github.add_code(REPO, f"src/deploy_{n}.py", f"deploy = {n}")


async def test_a_shown_message_deleted_between_pages_does_not_hide_an_unshown_one(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed_slack(fakes, 30)
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        first = fakes.slack.messages[-1]["permalink"]  # newest: shown on page 1

        def delete_shown(page: int) -> None:
            if page == 1:
                fakes.slack.messages[:] = [
                    m for m in fakes.slack.messages if m["permalink"] != first
                ]

        urls, pages, _ = await _page_all(client, [q("deploy")], 5, between=delete_shown)
    assert first in urls[:5]
    assert len(urls) == len(set(urls)) == 30  # 29 left + the one shown before it went
    assert not pages[-1].next_page_token


async def test_one_rate_limited_code_request_loses_no_code_file(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed_github(fakes, 30)
    fakes.github.fail_call("/search/code", 1, 429, headers={"Retry-After": "0"})
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes, GITHUB)
        urls, pages, statuses = await _page_all(client, [q("deploy", provider=GITHUB)], 10)
    assert len(urls) == len(set(urls)) == 60
    assert not pages[0].ranking_is_exact  # the first page lacked the code leg and said so
    (first,) = statuses[0]
    assert first.partial
    assert first.HasField("retry_after")


async def test_a_leg_failing_on_the_third_page_is_retried_not_dropped(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed_github(fakes, 30)
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes, GITHUB)

        def fail_code(page: int) -> None:
            if page == 2:
                fakes.github.fail_call("/search/code", 1, 429, headers={"Retry-After": "0"})

        urls, pages, _ = await _page_all(
            client, [q("deploy", provider=GITHUB)], 10, between=fail_code
        )
    assert len(urls) == len(set(urls)) == 60
    assert not pages[-1].next_page_token


async def test_a_rate_limit_with_a_wait_is_honoured_on_the_next_page(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed_slack(fakes, 30)
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        _, (page,) = await client.run(pb.SearchWorkspaceRequest(queries=[q("deploy")], top_k=5))
        fakes.slack.rate_limit(120, times=1)
        fakes.slack.answer({"ok": False, "error": "ratelimited"}, times=1)
        request = pb.SearchWorkspaceRequest(
            queries=[q("deploy")], top_k=5, page_token=page.next_page_token
        )
        statuses, (limited,) = await client.run(request)
        sent = fakes.slack.requests["/api/assistant.search.context"]
        assert limited.next_page_token  # the list is not over, only waiting
        again = pb.SearchWorkspaceRequest(
            queries=[q("deploy")], top_k=5, page_token=limited.next_page_token
        )
        statuses, _ = await client.run(again)
    assert fakes.slack.requests["/api/assistant.search.context"] == sent  # not asked again
    (status,) = statuses
    assert status.state == pb.QUERY_STATE_RATE_LIMITED
    assert 60 < status.retry_after.seconds <= 120


async def test_the_same_issue_through_two_accounts_is_one_result(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed_github(fakes, 3)
    async with serving(fakes, tmp_path) as client:
        first = await client.connect(fakes, GITHUB)
        second = await client.connect(fakes, GITHUB)
        _, (page,) = await client.run(pb.SearchWorkspaceRequest(
            queries=[q("deploy", provider=GITHUB, kind=pb.QUERY_KIND_ISSUES)], top_k=10
        ))
    assert len(page.results) == 3
    for result in page.results:
        assert {c.account_id for c in result.contributions} == {first, second}


async def test_statuses_one_per_query_and_page_and_no_account_is_skipped(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed_slack(fakes, 12)
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        statuses, _ = await client.run(pb.SearchWorkspaceRequest(
            queries=[q("deploy"), q("from:me", provider=cpb.PROVIDER_GMAIL)], top_k=5
        ))
    assert sorted(s.query_index for s in statuses) == [0, 1]  # one each, not two
    unmatched = next(s for s in statuses if s.query_index == 1)
    assert unmatched.state == pb.QUERY_STATE_SKIPPED
    assert "no connected gmail account" in unmatched.message


async def test_a_rate_limited_issue_leg_sets_retry_after_and_is_said_once(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed_github(fakes, 3)
    fakes.github.rate_limit(7, path="/search/issues", times=1)
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes, GITHUB)
        statuses, (page,) = await client.run(
            pb.SearchWorkspaceRequest(queries=[q("deploy OR build", provider=GITHUB)])
        )
    (status,) = statuses
    assert status.partial
    assert status.retry_after.seconds == 7
    assert not page.ranking_is_exact
    sentences = [s.strip() for s in status.message.split(".") if s.strip()]
    assert len(sentences) == len(set(sentences)), status.message


async def test_an_empty_repository_list_is_not_cached_nor_exact(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes, GITHUB)
        statuses, (page,) = await client.run(
            pb.SearchWorkspaceRequest(queries=[q("deploy", provider=GITHUB)])
        )
        (status,) = statuses
        assert "nothing was searched" in status.message
        assert status.partial
        assert not page.ranking_is_exact
        _seed_github(fakes, 2)  # repositories appear: the next call sees them at once
        _, (later,) = await client.run(
            pb.SearchWorkspaceRequest(queries=[q("deploy", provider=GITHUB)])
        )
    assert len(later.results) == 4
