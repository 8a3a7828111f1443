"""Workspace search end to end: engine -> real HTTP -> fake providers, accounts in SQLite."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

import pytest

from service.errors import InvalidPageToken
from service.fakes.suite import FakeProviders
from service.ranking import rrf
from service.timerange import TimeRange
from service.workspace.model import Kind, NativeDocument, ProviderId, QueryState
from service.workspace.plan import NativeQuery
from service.workspace.results import fusion_key, result_id
from tests.integration.workspace_support import World, build_world

pytest_plugins = ["tests.fakes.fixtures", "tests.integration.workspace_fixtures"]

SLACK = ProviderId.SLACK
GH = ProviderId.GITHUB
WORDS = ("alpha", "bravo", "charlie")


def slack_id(account_id: str, message: dict[str, str]) -> str:
    """The fused result id of a fake Slack message."""
    doc = NativeDocument(message["message_ts"], "", message["permalink"])
    return result_id(fusion_key(SLACK, account_id, doc))


def seed_slack(fakes: FakeProviders, count: int = 36) -> None:
    """Messages holding random subsets of WORDS (seeded), distinct timestamps."""
    chooser = random.Random(7)
    for i in range(count):
        picked = [w for w in WORDS if chooser.random() < 0.45] or [chooser.choice(WORDS)]
        fakes.slack.add_message("C1", "general", f"{1_700_000_000 + i}.000100", " ".join(picked))


def complete_list(fakes: FakeProviders, account_id: str, word: str) -> list[str]:
    """What the fake would return for `word`, all pages, newest first."""
    hits = [m for m in fakes.slack.messages if word in m["content"]]
    hits.sort(key=lambda m: float(m["message_ts"]), reverse=True)
    return [slack_id(account_id, m) for m in hits]


async def test_a_document_two_queries_return_ranks_first(world: World) -> None:
    account = await world.connect(SLACK)
    slack = world.fakes.slack
    slack.add_message("C1", "general", "300.000000", "trip plan")
    slack.add_message("C1", "general", "250.000000", "travel budget")
    slack.add_message("C1", "general", "200.000000", "trip travel both")
    outcome = await world.search([NativeQuery(SLACK, "trip"), NativeQuery(SLACK, "travel")])
    (page,) = outcome.pages
    both = slack_id(account, slack.messages[2])
    assert page.results[0].result_id == both
    assert [(c.query_index, c.rank) for c in page.results[0].contributions] == [(0, 2), (1, 2)]
    assert page.results[0].score == pytest.approx(2 / 62)
    assert len(page.results) == 3
    assert page.ranking_is_exact
    assert [card.provider for card in page.cards] == [SLACK]
    assert sorted(outcome.latest()) == [(0, account), (1, account)]
    assert {s.result_count for s in outcome.latest().values()} == {2}
    assert slack.requests["/api/assistant.search.context"] == 2


async def test_a_result_repeated_within_one_query_scores_once(world: World) -> None:
    await world.connect(SLACK)
    slack = world.fakes.slack
    slack.add_message("C1", "general", "300.000000", "echo")
    slack.add_message("C1", "general", "300.000000", "echo")  # the provider lists it twice
    slack.add_message("C1", "general", "100.000000", "echo later")
    (page,) = (await world.search([NativeQuery(SLACK, "echo")])).pages
    assert [len(r.contributions) for r in page.results] == [1, 1]
    assert page.results[0].score == 1 / 61
    assert page.results[1].contributions[0].rank == 3  # ranks stay positions in the list


async def test_paging_five_pages_equals_fusing_the_complete_lists(exact_world: World) -> None:
    world = exact_world
    account = await world.connect(SLACK)
    seed_slack(world.fakes)
    lists = [complete_list(world.fakes, account, word) for word in WORDS]
    expected = [item.key for item in rrf.fuse(lists)]
    queries = [NativeQuery(SLACK, word) for word in WORDS]
    seen: list[str] = []
    token = ""
    for number in range(1, 6):
        outcome = await world.search(queries, top_k=5, page_token=token)
        (page,) = outcome.pages
        assert page.page_number == number
        assert page.ranking_is_exact
        seen += [r.result_id for r in page.results]
        token = page.next_page_token
        assert token
    assert seen == expected[:25]
    # The same five pages streamed by one call, and the rest of the list after them.
    streamed = await world.search(queries, top_k=5, max_pages=5)
    assert streamed.ids() == seen
    assert [p.page_number for p in streamed.pages] == [1, 2, 3, 4, 5]
    rest = await world.search(queries, top_k=5, max_pages=10, page_token=token)
    assert rest.pages[-1].next_page_token == ""
    assert seen + rest.ids() == expected


async def test_best_effort_pages_still_never_skip_or_repeat(world: World) -> None:
    world = build_world(world.fakes, world.store, min_provider_page=1)  # pages of top_k
    account = await world.connect(SLACK)
    seed_slack(world.fakes)
    lists = [complete_list(world.fakes, account, word) for word in WORDS]
    expected = {item.key for item in rrf.fuse(lists)}
    queries = [NativeQuery(SLACK, word) for word in WORDS]
    outcome = await world.search(queries, top_k=4, max_pages=10)
    ids = outcome.ids()
    token = outcome.pages[-1].next_page_token
    while token:
        more = await world.search(queries, top_k=4, max_pages=3, page_token=token)
        ids += more.ids()
        token = more.pages[-1].next_page_token
    assert len(ids) == len(set(ids))
    assert set(ids) == expected
    assert not outcome.pages[0].ranking_is_exact  # 3 rounds cannot prove the first page


async def test_each_query_cursor_resumes_right_after_its_emitted_results(world: World) -> None:
    account = await world.connect(SLACK)
    seed_slack(world.fakes)
    queries = [NativeQuery(SLACK, word) for word in WORDS]
    first = await world.search(queries, top_k=5)
    emitted = {
        r.result_id for r in first.pages[0].results
        if any(c.query_index == 0 for c in r.contributions)
    }
    status = first.latest()[(0, account)]
    assert status.result_count == len(emitted)
    cursor = status.next_cursor
    alone: list[str] = []
    while cursor:
        outcome = await world.search([NativeQuery(SLACK, "alpha", cursor=cursor)], top_k=7)
        alone += outcome.ids()
        cursor = outcome.latest()[(0, account)].next_cursor
    full = complete_list(world.fakes, account, "alpha")
    assert sorted(emitted) + alone == sorted(emitted) + [i for i in full if i not in emitted]
    with pytest.raises(InvalidPageToken) as caught:
        await world.search([NativeQuery(SLACK, "bravo", cursor=status.next_cursor)])
    assert caught.value.violations[0].field == "queries[0].cursor"


def seed_github(fakes: FakeProviders) -> None:
    """One affiliated repository with a few issues about bugs."""
    fakes.github.add_repo("acme/app")
    for number in range(1, 4):
        fakes.github.add_issue("acme/app", number, f"bug {number}", "a bug report")


FAULTS = [
    ("status500", lambda f: f.fail_status(500), QueryState.FAILED),
    ("rate429", lambda f: f.rate_limit(30), QueryState.RATE_LIMITED),
    ("ok_false", lambda f: f.answer({"ok": False, "error": "ratelimited"}),
     QueryState.RATE_LIMITED),
    ("malformed", lambda f: f.malformed(), QueryState.FAILED),
    ("truncated", lambda f: f.truncate(), QueryState.FAILED),
    ("reset", lambda f: f.reset_connection(), QueryState.FAILED),
    ("denied", lambda f: f.answer({"ok": False, "error": "invalid_auth"}),
     QueryState.NEEDS_RECONNECT),
    ("slow", lambda f: f.slow(5), QueryState.TIMED_OUT),
    ("drip", lambda f: f.drip(0.3), QueryState.TIMED_OUT),
]


@pytest.mark.parametrize(("name", "inject", "state"), FAULTS, ids=[f[0] for f in FAULTS])
async def test_a_faulty_query_gets_its_state_and_the_others_are_still_fused(
    world: World, name: str, inject: object, state: QueryState
) -> None:
    github = await world.connect(GH)
    slack = await world.connect(SLACK)
    seed_github(world.fakes)
    world.fakes.slack.add_message("C1", "general", "100.000000", "deploy")
    inject(world.fakes.slack)  # type: ignore[operator]
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome = await world.search(
        [NativeQuery(GH, "bug", kind=Kind.ISSUES), NativeQuery(SLACK, "deploy")],
        deadline=started + 1.0,
    )
    assert loop.time() - started < 1.5
    latest = outcome.latest()
    assert latest[(1, slack)].state is state
    assert latest[(0, github)].state is QueryState.OK
    (page,) = outcome.pages
    assert {r.provider for r in page.results} == {GH}
    assert len(page.results) == 3
    assert not page.ranking_is_exact
    if state is QueryState.RATE_LIMITED and name == "rate429":
        assert latest[(1, slack)].retry_after == 30
    if state is QueryState.NEEDS_RECONNECT:
        assert [c.provider for c in page.cards] == [GH]
    assert world.fakes.slack.token not in repr(outcome)


async def test_needs_reconnect_is_recorded_and_cleared_by_a_later_success(world: World) -> None:
    account = await world.connect(SLACK)
    world.fakes.slack.add_message("C1", "general", "100.000000", "deploy")
    world.fakes.slack.fail_status(401, times=1)
    first = await world.search([NativeQuery(SLACK, "deploy")])
    assert first.latest()[(0, account)].state is QueryState.NEEDS_RECONNECT
    listing = await world.engine.list_accounts("tenant-a")
    assert listing.accounts[0].view.account.needs_reconnect
    assert listing.accounts[0].card is None
    assert listing.guidance.cards == ()
    second = await world.search([NativeQuery(SLACK, "deploy")])
    assert second.latest()[(0, account)].state is QueryState.OK
    listing = await world.engine.list_accounts("tenant-a")
    assert not listing.accounts[0].view.account.needs_reconnect


async def test_cancelling_the_call_stops_provider_requests(world: World) -> None:
    await world.connect(SLACK)
    seed_slack(world.fakes, 60)
    world.fakes.slack.server.latency = 0.2
    queries = [NativeQuery(SLACK, word) for word in WORDS]
    task = asyncio.create_task(world.search(queries, top_k=5, max_pages=10))
    path = "/api/assistant.search.context"
    # The fake owns the counter; poll until the second fetch round is in flight.
    while world.fakes.slack.requests[path] < 4:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    count = world.fakes.slack.requests[path]
    await asyncio.sleep(0.5)
    assert world.fakes.slack.requests[path] == count


async def test_the_deadline_bounds_every_provider_request(world: World) -> None:
    await world.connect(GH)
    slack = await world.connect(SLACK)
    seed_github(world.fakes)
    world.fakes.slack.server.latency = 3.0
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome = await world.search(
        [NativeQuery(GH, "bug", kind=Kind.ISSUES), NativeQuery(SLACK, "deploy")],
        deadline=started + 0.6,
    )
    assert loop.time() - started < 0.85
    assert outcome.latest()[(1, slack)].state is QueryState.TIMED_OUT
    assert len(outcome.pages[0].results) == 3


async def test_a_query_reaching_no_account_is_skipped_not_reconnect(world: World) -> None:
    await world.connect(SLACK)
    outcome = await world.search([NativeQuery(ProviderId.GMAIL, "from:me"),
                                  NativeQuery(SLACK, "x")])
    unmatched = outcome.latest()[(0, "")]
    # No account is not a refused credential: nothing to reconnect (issue 14 item 7).
    assert unmatched.state is QueryState.SKIPPED
    assert "no connected gmail account" in unmatched.message
    assert [s.query_index for s in outcome.statuses].count(0) == 1
    assert [c.provider for c in outcome.pages[0].cards] == [SLACK]
    assert not outcome.pages[0].ranking_is_exact  # the Gmail query's results are missing


async def test_time_ranges_are_rechecked_start_inclusive_end_exclusive(world: World) -> None:
    account = await world.connect(SLACK)
    start = datetime(2025, 3, 1, tzinfo=UTC)
    end = datetime(2025, 3, 2, tzinfo=UTC)
    for when in (start.timestamp() - 1, start.timestamp(), end.timestamp() - 1, end.timestamp()):
        world.fakes.slack.add_message("C1", "general", f"{when:.6f}", "standup notes")
    query = NativeQuery(SLACK, "standup", time_range=TimeRange(start, end))
    (page,) = (await world.search([query])).pages
    kept = {slack_id(account, m) for m in world.fakes.slack.messages[1:3]}
    assert {r.result_id for r in page.results} == kept


async def test_github_without_kind_skips_code_for_boolean_queries(world: World) -> None:
    account = await world.connect(GH)
    seed_github(world.fakes)
    outcome = await world.search([NativeQuery(GH, "bug OR crash")])
    status = outcome.latest()[(0, account)]
    assert status.state is QueryState.OK
    assert "code" in status.message
    assert world.fakes.github.requests["/search/code"] == 0


async def test_a_page_token_of_another_tenant_is_rejected(world: World) -> None:
    await world.connect(SLACK)
    await world.connect(SLACK, tenant="tenant-b")
    seed_slack(world.fakes)
    first = await world.search([NativeQuery(SLACK, "alpha")], top_k=2)
    token = first.pages[0].next_page_token
    with pytest.raises(InvalidPageToken):
        await world.search([NativeQuery(SLACK, "alpha")], top_k=2, page_token=token,
                           tenant="tenant-b")
