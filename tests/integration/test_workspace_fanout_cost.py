"""What one workspace search costs in provider round trips: stubs, pooling, page sizes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.fakes.suite import FakeProviders
from service.timerange import TimeRange
from service.workspace.model import ProviderId, QueryState
from service.workspace.plan import NativeQuery
from tests.integration.workspace_support import World, build_world

pytest_plugins = ["tests.fakes.fixtures", "tests.integration.workspace_fixtures"]

GMAIL = ProviderId.GMAIL
SLACK = ProviderId.SLACK
LIST = "/gmail/v1/users/me/messages"
START = datetime(2026, 3, 1, tzinfo=UTC)


def seed_gmail(fakes: FakeProviders, count: int) -> None:
    """`count` budget messages, one hour apart, newest last."""
    for i in range(count):
        fakes.gmail.add_message(f"m{i}", f"Budget {i}", f"budget line {i}",
                                sent=START + timedelta(hours=i))


def gets(fakes: FakeProviders) -> int:
    """Message metadata reads served by the Gmail fake."""
    return sum(n for path, n in fakes.gmail.requests.items() if path.startswith(LIST + "/"))


async def test_gmail_reads_metadata_only_for_emitted_messages(world: World) -> None:
    world = build_world(world.fakes, world.store, prefetch_details=False)
    await world.connect(GMAIL)
    seed_gmail(world.fakes, 12)
    outcome = await world.search([NativeQuery(GMAIL, "budget")], top_k=3)
    (page,) = outcome.pages
    assert [r.title for r in page.results] == ["Budget 11", "Budget 10", "Budget 9"]
    assert page.results[0].snippet == "budget line 11"
    assert page.ranking_is_exact
    assert world.fakes.gmail.requests[LIST] == 1
    assert gets(world.fakes) == 3  # not one per listed message


async def test_gmail_prefetches_what_a_first_page_can_take_from_each_list(world: World) -> None:
    await world.connect(GMAIL)
    seed_gmail(world.fakes, 12)
    queries = [NativeQuery(GMAIL, "budget"), NativeQuery(GMAIL, "line")]
    outcome = await world.search(queries, top_k=3)
    (page,) = outcome.pages
    assert all(r.title.startswith("Budget") for r in page.results)
    assert world.fakes.gmail.requests[LIST] == 2
    # At most ceil(3 / 2) + 1 = 3 stubs of each list are read while fusion waits (the two
    # lists hold the same messages; reads the page did not need may be cancelled in flight).
    assert 3 <= gets(world.fakes) <= 6


async def test_gmail_with_a_time_range_reads_every_listed_date(world: World) -> None:
    await world.connect(GMAIL)
    seed_gmail(world.fakes, 6)
    window = TimeRange(START, START + timedelta(hours=3))
    outcome = await world.search([NativeQuery(GMAIL, "budget", time_range=window)], top_k=5)
    (page,) = outcome.pages
    assert [r.title for r in page.results] == ["Budget 2", "Budget 1", "Budget 0"]
    # Each listed message is read for its date: Gmail's bounds are widened by a second, so
    # the one sent exactly at the (exclusive) end is listed, read, and dropped by the recheck.
    assert gets(world.fakes) == 4


async def test_unreadable_details_still_emit_the_result_and_mark_the_query_partial(
    world: World,
) -> None:
    account = await world.connect(GMAIL)
    seed_gmail(world.fakes, 3)
    world.fakes.gmail.fail_status(500, path="/messages/m1")
    outcome = await world.search([NativeQuery(GMAIL, "budget")], top_k=3)
    (page,) = outcome.pages
    assert [r.title for r in page.results] == ["Budget 2", "(message details unavailable)",
                                               "Budget 0"]
    assert page.results[1].url.endswith("#all/m1")
    assert not page.ranking_is_exact
    status = outcome.latest()[(0, account)]
    assert status.state is QueryState.OK
    assert status.partial
    assert "details of some results could not be read" in status.message


async def test_connections_and_memo_are_reused_across_calls(world: World) -> None:
    await world.connect(ProviderId.GITLAB)
    world.fakes.gitlab.add_project(1, "acme/app")
    world.fakes.gitlab.add_issue(1, 1, "deploy", "deploy notes", updated_at="2026-01-01T00:00:00Z")
    query = NativeQuery(ProviderId.GITLAB, "deploy")
    for _ in range(3):
        (page,) = (await world.search([query])).pages
        assert len(page.results) == 1
    counts = world.fakes.gitlab.requests
    assert counts["/api/v4/projects"] == 1  # the member-project list is memoised
    await world.engine.aclose()


async def test_one_round_when_lists_end_within_the_first_provider_page(world: World) -> None:
    await world.connect(SLACK)
    for i in range(15):
        world.fakes.slack.add_message("C1", "general", f"{1_700_000_000 + i}.000100",
                                      "alpha" if i % 2 else "alpha bravo")
    queries = [NativeQuery(SLACK, "alpha"), NativeQuery(SLACK, "bravo")]
    (page,) = (await world.search(queries, top_k=5)).pages
    assert page.ranking_is_exact
    assert world.fakes.slack.requests["/api/assistant.search.context"] == 2
