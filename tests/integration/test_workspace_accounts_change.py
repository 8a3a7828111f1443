"""Accounts connected and disconnected between pages of a search.

A page token was bound to the (query, account) lists the search reached, in order, so
connecting or disconnecting any account of a query's provider between pages made every
outstanding token of that query INVALID_ARGUMENT "token belongs to another request;
restart without a token": a caller paging a tenant's Drive search had to start again (and
see every result again) whenever anyone in the tenant connected a Drive account. A query
naming an account disconnected since its first page was INVALID_ARGUMENT too, which stopped
the call's other queries. Now a token names its lists: every other list resumes where it
was, a new account's lists start from their first page (results already emitted are not
emitted again), a disconnected account's lists end with a SKIPPED status naming the account,
and a query naming a disconnected account (by account_id or by its cursor) is SKIPPED on the
pages after.
"""

from __future__ import annotations

import random
from pathlib import Path

import grpc
import pytest

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import Client, serving
from tests.support.drive import add_files

pytest_plugins = ["tests.fakes.fixtures"]

DRIVE = cpb.PROVIDER_GOOGLE_DRIVE
FILES = 30
ALPHA = "fullText contains 'alpha'"


def _seed(fakes: FakeProviders) -> None:
    add_files(fakes, FILES)


async def _connect(client: Client, fakes: FakeProviders, name: str) -> str:
    reply = await client.accounts.ConnectAccount(apb.ConnectAccountRequest(
        provider=DRIVE, display_name=name,
        credentials=apb.Credentials(token=fakes.google_drive.token),
    ), metadata=client.metadata)
    return reply.account.account_id


async def _disconnect(client: Client, account_id: str) -> None:
    await client.accounts.DisconnectAccount(
        apb.DisconnectAccountRequest(account_id=account_id), metadata=client.metadata
    )


async def test_paging_goes_on_when_accounts_come_and_go(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed(fakes)
    async with serving(fakes, tmp_path) as client:
        kept = await _connect(client, fakes, "kept")
        leaving = await _connect(client, fakes, "leaving")
        queries = [
            pb.NativeQuery(provider=DRIVE, text=ALPHA),  # every Drive account
            pb.NativeQuery(provider=DRIVE, text="fullText contains 'plan'", account_id=leaving),
        ]
        seen: list[str] = []
        token, pages, joined = "", 0, ""
        while True:
            statuses, (page,) = await client.run(pb.SearchWorkspaceRequest(
                queries=queries, top_k=5, page_token=token), seconds=30)
            pages += 1
            states = {(s.query_index, s.account_id): s for s in statuses}
            if pages == 2:  # the first page after the change says what ended and joined
                gone = [states[(0, leaving)], states[(1, leaving)]]
                assert {s.state for s in gone} == {pb.QUERY_STATE_SKIPPED}
                assert all("disconnected" in s.message for s in gone)
                assert states[(0, kept)].state == states[(0, joined)].state == pb.QUERY_STATE_OK
            if pages > 2:
                assert (0, leaving) not in states  # said once
                assert states[(1, leaving)].state == pb.QUERY_STATE_SKIPPED
            seen += [r.result_id for r in page.results]
            if pages == 1:
                await _disconnect(client, leaving)
                joined = await _connect(client, fakes, "joined")
            if not page.next_page_token:
                break
            token = page.next_page_token
            assert pages < 20, "paging does not end"
    assert pages > 2
    assert len(seen) == len(set(seen)), "a result came back twice"
    assert len(seen) == FILES, "results were lost"


@pytest.mark.parametrize("seed", range(12))
async def test_random_account_changes_never_skip_or_repeat(
    fakes: FakeProviders, tmp_path: Path, seed: int
) -> None:
    """One account stays connected from the first page to the last, so every file is
    present on it throughout: whatever else is connected, disconnected or reconnected
    between pages, each file comes back exactly once and the last page means the end."""
    rng = random.Random(seed)
    _seed(fakes)
    async with serving(fakes, tmp_path) as client:
        await _connect(client, fakes, "anchor")
        others = [await _connect(client, fakes, f"other {i}") for i in range(rng.randint(0, 3))]
        seen: list[str] = []
        token, pages, top_k = "", 0, rng.choice((3, 5, 7))
        while True:
            statuses, (page,) = await client.run(pb.SearchWorkspaceRequest(
                queries=[pb.NativeQuery(provider=DRIVE, text=ALPHA)],
                top_k=top_k, page_token=token), seconds=30)
            pages += 1
            assert {s.state for s in statuses} <= {pb.QUERY_STATE_OK, pb.QUERY_STATE_SKIPPED}
            seen += [r.result_id for r in page.results]
            for _ in range(rng.randint(0, 2)):
                if others and rng.random() < 0.5:
                    await _disconnect(client, others.pop(rng.randrange(len(others))))
                else:
                    others.append(await _connect(client, fakes, f"new {pages}"))
            if not page.next_page_token:
                break
            token = page.next_page_token
            assert pages < 40, "paging does not end"
    assert len(seen) == len(set(seen)), "a result came back twice"
    assert len(seen) == FILES, "results were lost"


async def test_a_cursor_of_a_disconnected_account_is_skipped_not_invalid(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    """A query's `next_cursor` continues it on one account. When that account was
    disconnected since, the query is SKIPPED naming it (the call's other queries go on); it
    was INVALID_ARGUMENT "cursor belongs to no account of this query". A cursor that was
    never issued is still INVALID_ARGUMENT."""
    _seed(fakes)
    async with serving(fakes, tmp_path) as client:
        kept = await _connect(client, fakes, "kept")
        leaving = await _connect(client, fakes, "leaving")
        statuses, _ = await client.run(pb.SearchWorkspaceRequest(
            queries=[pb.NativeQuery(provider=DRIVE, text=ALPHA)], top_k=5), seconds=30)
        cursor = {s.account_id: s.next_cursor for s in statuses}[leaving]
        assert cursor
        await _disconnect(client, leaving)
        other = pb.NativeQuery(provider=DRIVE, text="fullText contains 'plan'", account_id=kept)
        for gone in (pb.NativeQuery(provider=DRIVE, text=ALPHA, cursor=cursor),
                     pb.NativeQuery(provider=DRIVE, text=ALPHA, cursor=cursor,
                                    account_id=leaving)):
            statuses, (page,) = await client.run(pb.SearchWorkspaceRequest(
                queries=[gone, other], top_k=5), seconds=30)
            states = {(s.query_index, s.account_id): s for s in statuses}
            assert states[(0, leaving)].state == pb.QUERY_STATE_SKIPPED
            assert "disconnected" in states[(0, leaving)].message
            assert states[(1, kept)].state == pb.QUERY_STATE_OK
            assert page.results
        forged = pb.NativeQuery(provider=DRIVE, text=ALPHA, cursor=cursor[:-3] + "AAA")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client.run(pb.SearchWorkspaceRequest(queries=[forged, other]), seconds=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "queries[0].cursor" in (caught.value.details() or "")
