"""A provider that stays down while a search is paged.

Failed work is carried to the next page, so a list whose provider answered 500 to every
read kept the search's pages coming forever: each call returned an empty page with a token,
no `retry_after`, and read the provider again at once, so a caller paging "until there is
no token" looped as fast as it could against the service and the provider. Now each page
whose reads of a list all failed advises a `retry_after` (1 s, doubling to 60 s: the client
waits it out before the next call), and a list that failed on 3 consecutive pages over
5 minutes (here 0 s) ends, FAILED, saying so; a provider that recovers resets the streak.

A provider that hangs is down too: a read that got no answer within the whole provider
request timeout, or within half of a shorter call's time, counts like a 500 (before, each
page waited out the timeout and came back TIMED_OUT with a token, forever). A read the
deadline cut because its turn came late does not count (test_workspace_deadline_fairness).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import Client, q, serving

pytest_plugins = ["tests.fakes.fixtures"]

MESSAGES = 12


def _seed(fakes: FakeProviders) -> None:
    for i in range(MESSAGES):
        fakes.slack.add_message("C1", "general", f"{1000 + i}.000000", "alpha bravo")


async def _page(
    client: Client, token: str = "", seconds: float = 30
) -> tuple[pb.QueryStatus, pb.FusedPage]:
    statuses, (page,) = await client.run(pb.SearchWorkspaceRequest(
        queries=[q("alpha")], top_k=5, page_token=token), seconds=seconds)
    (status,) = statuses
    return status, page


async def _pages_while_down(
    client: Client, token: str, seconds: float = 30
) -> tuple[list[pb.QueryStatus], list[float], str]:
    """Page on from `token` (at most 10 pages) while the provider stays down: each page's
    status, the `retry_after` advised on each page that still had a token, and the token left
    ('' once the list ended). No page has results, and none takes much past `seconds`."""
    statuses: list[pb.QueryStatus] = []
    waits: list[float] = []
    for _ in range(10):
        began = time.monotonic()
        status, page = await _page(client, token, seconds)
        assert time.monotonic() - began < seconds + 4
        assert not page.results
        statuses.append(status)
        token = page.next_page_token
        if not token:
            break
        waits.append(status.retry_after.ToTimedelta().total_seconds())
    return statuses, waits, token


async def test_a_list_that_keeps_failing_advises_a_wait_then_ends(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed(fakes)
    async with serving(fakes, tmp_path, give_up_seconds=0.0) as client:
        await client.connect(fakes)
        _, first = await _page(client)
        assert len(first.results) == 5
        fakes.slack.fail_status(500)
        statuses, waits, token = await _pages_while_down(client, first.next_page_token)
        last = statuses[-1]
        assert {s.state for s in statuses} == {pb.QUERY_STATE_FAILED}
        assert not token, "a provider that stays down keeps the pages coming"
        assert waits == [1.0, 2.0]
        assert "gave up: every read failed on 3 consecutive pages" in last.message
        assert not last.HasField("retry_after")


async def test_a_provider_that_recovers_resets_the_streak(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed(fakes)
    async with serving(fakes, tmp_path) as client:  # the default: give up after 5 minutes
        await client.connect(fakes)
        _, first = await _page(client)
        seen = [r.result_id for r in first.results]
        fault = fakes.slack.fail_status(500)
        token = first.next_page_token
        waits = []
        for _ in range(4):  # more failing pages than GIVE_UP_ATTEMPTS: too soon to give up
            status, page = await _page(client, token)
            assert status.state == pb.QUERY_STATE_FAILED
            waits.append(status.retry_after.ToTimedelta().total_seconds())
            token = page.next_page_token
            assert token
        assert waits == [1.0, 2.0, 4.0, 8.0]
        fakes.slack.server.faults.remove(fault)
        while token:
            status, page = await _page(client, token)
            assert status.state == pb.QUERY_STATE_OK
            assert not status.HasField("retry_after")
            seen += [r.result_id for r in page.results]
            token = page.next_page_token
        assert sorted(seen) == sorted(set(seen))
        assert len(seen) == MESSAGES


@pytest.mark.parametrize(
    ("env", "call_seconds", "advice"),
    [
        # The request timeout (0.3 s) ran out with no answer.
        ({"SEARCH_PROVIDER_REQUEST_TIMEOUT": "0.3"}, 30.0, ""),
        # The request timeout is 10 s, the caller's deadline 1 s: the read had most of the
        # call's time and no answer, on every page.
        ({}, 1.0, "give the call a longer deadline"),
    ],
    ids=["past the request timeout", "slower than every call"],
)
async def test_a_provider_that_hangs_is_given_up_like_one_that_fails(
    fakes: FakeProviders, tmp_path: Path, env: dict[str, str], call_seconds: float, advice: str
) -> None:
    _seed(fakes)
    async with serving(fakes, tmp_path, env=env, give_up_seconds=0.0) as client:
        await client.connect(fakes)
        _, first = await _page(client)
        fakes.slack.slow(30)
        statuses, waits, token = await _pages_while_down(client, first.next_page_token,
                                                         call_seconds)
        last = statuses[-1]
        assert not token, "a provider that hangs keeps the pages coming"
        assert [s.state for s in statuses] == [pb.QUERY_STATE_TIMED_OUT] * 2 + [
            pb.QUERY_STATE_FAILED]
        assert waits == [1.0, 2.0]
        assert "gave up: every read failed on 3 consecutive pages" in last.message
        assert advice in last.message
