"""The client's wait between workspace calls: only an empty page left waiting on a rate limit."""

from __future__ import annotations

from google.protobuf import duration_pb2

from search_client._convert_workspace import RateLimitPause
from search_client._options import MAX_RATE_LIMIT_PAUSE
from search_client.pb.search.v1 import workspace_search_pb2 as pb


class Clock:
    """A settable clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def status(
    query: int, retry_after: float | None, account: str = "a1"
) -> pb.SearchWorkspaceResponse:
    message = pb.QueryStatus(query_index=query, account_id=account)
    if retry_after is not None:
        wait = duration_pb2.Duration()
        wait.FromNanoseconds(int(retry_after * 1e9))
        message.retry_after.CopyFrom(wait)
    return pb.SearchWorkspaceResponse(query_status=message)


def page(results: int = 0, following: str = "next") -> pb.SearchWorkspaceResponse:
    found = [pb.FusedResult(result_id=f"r{n}") for n in range(results)]
    return pb.SearchWorkspaceResponse(page=pb.FusedPage(results=found, next_page_token=following))


def test_an_empty_page_with_a_token_waits_for_the_largest_remaining_retry_after() -> None:
    clock = Clock()
    pause = RateLimitPause(clock)
    assert pause(status(0, 2.0)) == 0.0
    assert pause(status(1, 5.0)) == 0.0
    assert pause(status(2, None)) == 0.0
    clock.now += 1.5
    assert pause(page()) == 3.5


def test_no_wait_after_results_the_last_page_or_without_retry_after() -> None:
    pause = RateLimitPause(Clock())
    assert pause(page()) == 0.0  # nothing asked to wait
    pause(status(0, 3.0))
    assert pause(page(results=1)) == 0.0  # results came: the loop is not tight
    assert pause(page(following="")) == 0.0  # nothing follows the last page
    assert pause(page()) == 3.0  # a later empty page of the same call still waits


def test_a_newer_status_without_retry_after_clears_the_wait() -> None:
    pause = RateLimitPause(Clock())
    pause(status(0, 3.0))
    pause(status(0, None))
    assert pause(page()) == 0.0
    pause(status(0, 3.0, account="a2"))
    assert pause(page()) == 3.0  # another account of the same query is still waiting


def test_the_wait_is_capped_and_never_negative() -> None:
    clock = Clock()
    pause = RateLimitPause(clock)
    pause(status(0, 3600.0))
    assert pause(page()) == MAX_RATE_LIMIT_PAUSE == 60.0
    clock.now += 7200
    assert pause(page()) == 0.0
