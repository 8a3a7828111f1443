"""Gmail metadata through the batch endpoint, over real HTTP against the fake: the adapter on
its own, then paging through the engine and through the real gRPC server and channel (60
messages with a time range, none lost)."""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from service.fakes.suite import FakeProviders
from service.workspace.http import AccountSession, HttpClient
from service.workspace.model import (
    Credentials,
    NativeDocument,
    ProviderError,
    ProviderId,
    ProviderQuery,
    QueryState,
    TimeRange,
)
from service.workspace.plan import NativeQuery
from service.workspace.providers import _multipart as multipart
from service.workspace.providers import gmail
from tests.integration.test_workspace_grpc import serving
from tests.integration.workspace_support import World

pytest_plugins = ["tests.fakes.fixtures", "tests.integration.workspace_fixtures"]

GMAIL = ProviderId.GMAIL
START = datetime(2026, 3, 1, tzinfo=UTC)
WINDOW = TimeRange(START - timedelta(days=1), START + timedelta(days=30))
BATCH = "/batch/gmail/v1"
PROFILE = "/gmail/v1/users/me/profile"


def seed(fakes: FakeProviders, count: int) -> None:
    """`count` budget messages m0..m{count-1}, one hour apart, newest last."""
    for i in range(count):
        fakes.gmail.add_message(f"m{i}", f"Budget {i}", f"budget line {i}",
                                sent=START + timedelta(hours=i))


@asynccontextmanager
async def client(fakes: FakeProviders, *, budget: int = 30) -> AsyncIterator[HttpClient]:
    """One query's HttpClient on the Gmail fake."""
    session = fakes.session(GMAIL)
    try:
        yield session.for_query(budget=budget, deadline=None)
    finally:
        await session.aclose()


def dated(limit: int = 20, cursor: str | None = None) -> ProviderQuery:
    return ProviderQuery("budget", time_range=WINDOW, limit=limit, cursor=cursor)


# ---- the fake speaks the batch format -------------------------------------------------------


async def test_fake_batch_answers_multipart_with_echoed_content_ids(fakes: FakeProviders) -> None:
    seed(fakes, 2)
    boundary = "outer_b"
    calls = [("a1", gmail.detail_target("m1")), ("z9", gmail.detail_target("nope"))]
    async with httpx.AsyncClient() as client:
        response = await client.post(
            fakes.gmail.base_url + BATCH,
            content=multipart.encode_batch(calls, boundary),
            headers={"Authorization": f"Bearer {fakes.gmail.token}",
                     "Content-Type": f"multipart/mixed; boundary={boundary}"},
        )
        assert response.status_code == 200
        content_type = response.headers["Content-Type"]
        body = response.content
    assert content_type.startswith("multipart/mixed; boundary=batch_")
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    parsed = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    parts = list(parsed.iter_parts())
    assert [p["Content-ID"] for p in parts] == ["<response-a1>", "<response-z9>"]
    payloads = [p.get_payload(decode=True) for p in parts]
    assert all(isinstance(p, bytes) for p in payloads)
    first, second = (p.split(b"\r\n", 1)[0] for p in payloads if isinstance(p, bytes))
    assert (first, second) == (b"HTTP/1.1 200 OK", b"HTTP/1.1 404 Not Found")
    assert fakes.gmail.batch_sizes == [2]
    assert fakes.gmail.requests[BATCH] == 1
    assert fakes.gmail.requests["/gmail/v1/users/me/messages/m1"] == 1  # metered per call


async def test_fake_refuses_more_than_a_hundred_calls_and_unauthorised_batches(
    fakes: FakeProviders,
) -> None:
    calls = [(f"c{i}", gmail.detail_target(f"m{i}")) for i in range(101)]
    async with client(fakes) as http:
        with pytest.raises(ProviderError) as caught:
            await http.post_raw(BATCH, body=multipart.encode_batch(calls, "b"),
                                content_type="multipart/mixed; boundary=b")
    assert caught.value.state is QueryState.FAILED
    wrong = AccountSession(fakes.account(GMAIL), Credentials("wrong"), allow_insecure_http=True)
    try:
        with pytest.raises(ProviderError) as refused:
            await wrong.for_query(budget=1, deadline=None).post_raw(
                BATCH, body=multipart.encode_batch(calls[:1], "b"),
                content_type="multipart/mixed; boundary=b",
            )
    finally:
        await wrong.aclose()
    assert refused.value.state is QueryState.NEEDS_RECONNECT
    assert fakes.gmail.batch_sizes == []


async def test_post_raw_keeps_the_origin_size_and_deadline_checks(fakes: FakeProviders) -> None:
    seed(fakes, 5)
    calls = [(f"c{i}", gmail.detail_target(f"m{i}")) for i in range(5)]
    body = multipart.encode_batch(calls, "b")
    kind = "multipart/mixed; boundary=b"
    async with client(fakes) as http:
        with pytest.raises(ProviderError) as elsewhere:
            await http.post_raw("https://evil.test/batch/gmail/v1", body=body, content_type=kind)
        assert "another origin" in elsewhere.value.message
        assert http.requests_made == 0
    small = fakes.session(GMAIL, max_response_bytes=256)
    try:
        with pytest.raises(ProviderError) as large:
            await small.for_query(budget=5, deadline=None).post_raw(
                BATCH, body=body, content_type=kind
            )
        assert "too large" in large.value.message
        past = asyncio.get_running_loop().time() - 1
        with pytest.raises(ProviderError) as late:
            await small.for_query(budget=5, deadline=past).post_raw(
                BATCH, body=body, content_type=kind
            )
        assert late.value.state is QueryState.TIMED_OUT
    finally:
        await small.aclose()
    sent = [request for request in fakes.gmail.log if request.path == BATCH]
    assert len(sent) == 1  # the late one never left
    assert sent[0].headers["authorization"] == f"Bearer {fakes.gmail.token}"
    assert sent[0].headers["content-type"] == kind


# ---- the adapter ----------------------------------------------------------------------------


async def test_a_page_reads_every_listed_message_in_one_batch_request(
    fakes: FakeProviders,
) -> None:
    seed(fakes, 25)
    fakes.gmail.address = "jane+work@example.com"
    async with client(fakes) as http:
        page = await gmail.search(http, dated())
        assert http.requests_made == 3  # profile, list, one batch of 20 reads
        assert [d.id for d in page.documents] == [f"m{i}" for i in range(24, 4, -1)]
        assert page.complete
        assert not page.partial
        rest = await gmail.search(http, dated(cursor=page.next_cursor))
        assert http.requests_made == 5  # the profile is remembered for the account
    assert [d.id for d in rest.documents] == [f"m{i}" for i in range(4, -1, -1)]
    assert fakes.gmail.batch_sizes == [20, 5]
    assert fakes.gmail.requests[PROFILE] == 1
    first = page.documents[0]
    assert first.title == "Budget 24"
    assert first.url == "https://mail.google.com/mail/?authuser=jane%2Bwork@example.com#all/m24"


async def test_a_rate_limited_part_makes_the_page_partial_and_comes_back_on_a_reread(
    fakes: FakeProviders,
) -> None:
    seed(fakes, 5)
    fakes.gmail.fail_reads("m3", 429, retry_after=7)
    fakes.gmail.fail_reads("m1", 403)  # userRateLimitExceeded
    async with client(fakes) as http:
        page = await gmail.search(http, dated())
        assert [d.id for d in page.documents] == ["m4", "m2", "m0"]
        assert page.partial
        assert not page.complete  # the pager reads this provider page again
        assert page.retry_after is not None
        assert page.retry_after >= 7.0  # the longest wait a part asked for
        assert "message m3 failed" in page.message
        assert "userRateLimitExceeded" in page.message
        again = await gmail.search(http, dated())
    assert [d.id for d in again.documents] == ["m4", "m3", "m2", "m1", "m0"]
    assert again.complete


async def test_a_server_error_part_is_retried_and_a_final_one_is_not(
    fakes: FakeProviders,
) -> None:
    seed(fakes, 3)
    fakes.gmail.fail_reads("m2", 500)
    fakes.gmail.fail_reads("m0", 401)
    async with client(fakes) as http:
        page = await gmail.search(http, dated())
    assert [d.id for d in page.documents] == ["m1"]
    assert page.partial
    assert not page.complete  # the 500 is transient
    fakes.gmail.fail_reads("m0", 401)
    async with client(fakes) as http:
        final = await gmail.search(http, dated())
    assert [d.id for d in final.documents] == ["m2", "m1"]
    assert final.partial
    assert final.complete  # a refused read does not heal by retrying


async def test_a_message_deleted_after_listing_is_dropped(fakes: FakeProviders) -> None:
    seed(fakes, 4)
    fakes.gmail.delete_after_next_list("m2")
    async with client(fakes) as http:
        page = await gmail.search(http, dated())
    assert [d.id for d in page.documents] == ["m3", "m1", "m0"]
    assert page.complete
    assert not page.partial


async def test_every_part_failing_or_the_batch_failing_is_an_error(fakes: FakeProviders) -> None:
    seed(fakes, 2)
    for message_id in ("m0", "m1"):
        fakes.gmail.fail_reads(message_id, 429, retry_after=4)
    async with client(fakes) as http:
        with pytest.raises(ProviderError) as limited:
            await gmail.search(http, dated())
    assert (limited.value.state, limited.value.retry_after) == (QueryState.RATE_LIMITED, 4.0)
    fakes.gmail.fail_status(503, path=BATCH, times=1)
    async with client(fakes) as http:
        with pytest.raises(ProviderError) as failed:
            await gmail.search(http, dated())
    assert failed.value.state is QueryState.FAILED
    assert failed.value.retryable


async def test_budget_counts_the_batch_as_one_request(fakes: FakeProviders) -> None:
    seed(fakes, 20)
    async with client(fakes, budget=2) as http:
        with pytest.raises(ProviderError) as caught:
            await gmail.search(http, dated())  # profile + list spend it
        assert http.requests_made == 2
    assert "budget" in caught.value.message
    async with client(fakes, budget=3) as http:
        page = await gmail.search(http, dated())
        assert http.requests_made == 3
    assert len(page.documents) == 20


async def test_stubs_hydrated_together_share_one_batch(fakes: FakeProviders) -> None:
    seed(fakes, 6)
    async with client(fakes) as http:
        listed = await gmail.search_ids(http, ProviderQuery("budget", limit=6))
        stubs = listed.documents
        assert all(d.stub for d in stubs)
        done = await asyncio.gather(*(gmail.hydrate(http, d) for d in stubs))
        assert http.requests_made == 3  # profile, list, one batch
    assert fakes.gmail.batch_sizes == [6]
    assert [d.title for d in done] == [f"Budget {i}" for i in range(5, -1, -1)]
    assert [d.url for d in done] == [d.url for d in stubs]  # identity kept
    assert not any(d.stub for d in done)


async def test_hydrating_a_deleted_or_limited_message_raises(fakes: FakeProviders) -> None:
    seed(fakes, 3)
    async with client(fakes) as http:
        stubs = (await gmail.search_ids(http, ProviderQuery("budget"))).documents
        fakes.gmail.delete_message("m2")
        fakes.gmail.fail_reads("m1", 429, retry_after=3)
        outcomes = await asyncio.gather(
            *(gmail.hydrate(http, d) for d in stubs), return_exceptions=True
        )
    gone, limited, read = outcomes
    assert isinstance(gone, ProviderError)
    assert not gone.retryable
    assert isinstance(limited, ProviderError)
    assert (limited.state, limited.retry_after) == (QueryState.RATE_LIMITED, 3.0)
    assert isinstance(read, NativeDocument)
    assert read.title == "Budget 0"
    assert fakes.gmail.batch_sizes == [3]


async def test_a_cancelled_batch_leader_leaves_no_reader_waiting(fakes: FakeProviders) -> None:
    seed(fakes, 3)
    async with client(fakes) as http:
        stubs = (await gmail.search_ids(http, ProviderQuery("budget"))).documents
        fakes.gmail.slow(0.5, path=BATCH)
        tasks = [asyncio.create_task(gmail.hydrate(http, d)) for d in stubs]
        await asyncio.sleep(0.1)  # the batch is in flight
        tasks[0].cancel()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*tasks, return_exceptions=True), timeout=5
        )
    assert isinstance(outcomes[0], asyncio.CancelledError)
    for outcome in outcomes[1:]:
        assert isinstance(outcome, ProviderError)
        assert outcome.retryable


# ---- through the engine ---------------------------------------------------------------------


async def test_sixty_dated_messages_all_come_back_across_pages(world: World) -> None:
    account = await world.connect(GMAIL)
    seed(world.fakes, 60)
    query = NativeQuery(GMAIL, "budget", time_range=WINDOW)
    titles: list[str] = []
    token = ""
    requests_per_call: list[int] = []
    for _ in range(20):
        before = len(world.fakes.gmail.log)
        outcome = await world.search([query], top_k=10, page_token=token)
        requests_per_call.append(len(world.fakes.gmail.log) - before)
        assert outcome.latest()[(0, account)].state is QueryState.OK
        (page,) = outcome.pages
        titles += [r.title for r in page.results]
        token = page.next_page_token
        if not token:
            break
    assert len(titles) == len(set(titles))
    assert sorted(titles) == sorted(f"Budget {i}" for i in range(60))
    # Each provider page is a list request and one batch request, whatever its size.
    paths = [request.path for request in world.fakes.gmail.log]
    assert paths.count(BATCH) == paths.count("/gmail/v1/users/me/messages")
    assert paths.count(PROFILE) == 1  # once for the account, through the memo
    assert max(requests_per_call) <= 10  # the per-call budget is 30
    assert all(size <= gmail.MAX_BATCH for size in world.fakes.gmail.batch_sizes)


async def test_sixty_dated_messages_streamed_in_one_call(world: World) -> None:
    await world.connect(GMAIL)
    seed(world.fakes, 60)
    query = NativeQuery(GMAIL, "budget", time_range=WINDOW)
    outcome = await world.search([query], top_k=10, max_pages=10)
    titles = [r.title for page in outcome.pages for r in page.results]
    assert sorted(titles) == sorted(f"Budget {i}" for i in range(60))
    assert len(world.fakes.gmail.log) <= 30  # the whole call stays within one budget


async def test_a_deleted_message_is_dropped_from_the_fused_pages(world: World) -> None:
    account = await world.connect(GMAIL)
    seed(world.fakes, 5)
    world.fakes.gmail.delete_after_next_list("m3")
    query = NativeQuery(GMAIL, "budget", time_range=WINDOW)
    outcome = await world.search([query], top_k=10)
    (page,) = outcome.pages
    assert [r.title for r in page.results] == ["Budget 4", "Budget 2", "Budget 1", "Budget 0"]
    status = outcome.latest()[(0, account)]
    assert status.state is QueryState.OK
    assert not status.partial


async def test_a_stub_whose_message_was_deleted_is_not_emitted(world: World) -> None:
    """Without a time range the list gives stubs and only results about to be emitted are
    read; a message deleted since it was listed was emitted as a bare stub (a link to
    nothing) and the query called partial. It is dropped, as a listed one is."""
    account = await world.connect(GMAIL)
    seed(world.fakes, 5)
    world.fakes.gmail.delete_after_next_list("m3")
    outcome = await world.search([NativeQuery(GMAIL, "budget")], top_k=10)
    (page,) = outcome.pages
    assert [r.title for r in page.results] == ["Budget 4", "Budget 2", "Budget 1", "Budget 0"]
    assert not page.next_page_token
    status = outcome.latest()[(0, account)]
    assert status.state is QueryState.OK
    assert not status.partial, status.message


async def test_a_rate_limited_part_is_partial_then_returned_on_a_later_page(world: World) -> None:
    account = await world.connect(GMAIL)
    seed(world.fakes, 8)
    world.fakes.gmail.fail_reads("m6", 429, retry_after=2)
    query = NativeQuery(GMAIL, "budget", time_range=WINDOW)
    first = await world.search([query], top_k=4)
    (page,) = first.pages
    status = first.latest()[(0, account)]
    assert status.state is QueryState.OK
    assert status.partial
    assert status.retry_after == 2.0
    assert "m6" in status.message
    seen = [r.title for r in page.results]
    token = page.next_page_token
    while token:
        more = await world.search([query], top_k=4, page_token=token)
        (next_page,) = more.pages
        seen += [r.title for r in next_page.results]
        token = next_page.next_page_token
    assert len(seen) == len(set(seen))
    assert sorted(seen) == sorted(f"Budget {i}" for i in range(8))


async def test_stubs_of_a_page_are_hydrated_in_batches_through_the_engine(world: World) -> None:
    await world.connect(GMAIL)
    seed(world.fakes, 30)
    outcome = await world.search([NativeQuery(GMAIL, "budget")], top_k=8)
    (page,) = outcome.pages
    assert [r.title for r in page.results] == [f"Budget {i}" for i in range(29, 21, -1)]
    assert page.results[0].url.startswith("https://mail.google.com/mail/?authuser=me@example.com#")
    paths = [request.path for request in world.fakes.gmail.log]
    # profile, list, then the stubs read a batch at a time (prefetch, then the rest on emit)
    assert paths.count("/gmail/v1/users/me/messages") == 1
    assert 1 <= paths.count(BATCH) <= 2
    assert sum(world.fakes.gmail.batch_sizes) >= 8


# ---- through the gRPC server and channel ----------------------------------------------------


# Before issue 14, pages of 25 or more lost 12 of the 60 (detail reads past the budget).
@pytest.mark.parametrize("top_k", [10, 25, 50])
async def test_sixty_dated_messages_come_back_once_each_through_the_channel(
    fakes: FakeProviders, tmp_path: Path, top_k: int
) -> None:
    seed(fakes, 60)
    assert WINDOW.start is not None
    assert WINDOW.end is not None
    window = cpb.TimeRange(start_time=WINDOW.start, end_time=WINDOW.end)
    query = wpb.NativeQuery(provider=cpb.PROVIDER_GMAIL, text="budget", time_range=window)
    titles: list[str] = []
    token = ""
    async with serving(fakes, tmp_path) as client:
        account = await client.connect(fakes, cpb.PROVIDER_GMAIL)
        for _ in range(20):
            statuses, (page,) = await client.run(
                wpb.SearchWorkspaceRequest(queries=[query], top_k=top_k, page_token=token)
            )
            latest = {(s.query_index, s.account_id): s for s in statuses}
            assert latest[(0, account)].state == wpb.QUERY_STATE_OK
            titles += [r.title for r in page.results]
            token = page.next_page_token
            if not token:
                break
    assert not token  # paging ended within the pages allowed
    assert len(titles) == len(set(titles))  # none twice
    assert sorted(titles) == sorted(f"Budget {i}" for i in range(60))  # none lost
    paths = [request.path for request in fakes.gmail.log]
    assert paths.count(BATCH) == paths.count("/gmail/v1/users/me/messages")
