"""An account reconnected while its search is paged resumes where it stopped.

The provider refused an account's credentials in the middle of a search (a revoked token, a
password change): its lists ended, NEEDS_RECONNECT. The user reconnected the account
(UpdateAccountCredentials) and the caller paged on, but that account's remaining results
never came in this search, and the caller had no way to get them but to start again and
receive every other result a second time. Now such a list keeps its place in the page token
and in its `next_cursor`. While the account stays flagged it is not read again (no request
to a provider that refuses); once it is reconnected, the next page reads it from where it
stopped. Lists waiting for a reconnect do not keep the pages coming by themselves.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from service.workspace.lists import PARKED_MESSAGE, WAITING_MESSAGE
from tests.integration.test_workspace_grpc import Client, serving
from tests.support.reliability.world import WORDS, connect_all, queries_for, seed

pytest_plugins = ["tests.fakes.fixtures"]

ITEMS = 30


async def _page(
    client: Client, queries: list[pb.NativeQuery], token: str = ""
) -> tuple[dict[str, pb.QueryStatus], pb.FusedPage]:
    statuses, (page,) = await client.run(
        pb.SearchWorkspaceRequest(queries=queries, top_k=5, page_token=token), seconds=30
    )
    return {s.account_id: s for s in statuses}, page


def _providers(page: pb.FusedPage) -> list[int]:
    return [r.provider for r in page.results]


async def test_a_reconnected_account_resumes_on_the_next_page(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    seed(fakes, items_per_word=ITEMS)
    queries = queries_for("slack", WORDS[:1]) + queries_for("google_drive", WORDS[:1])
    async with serving(fakes, tmp_path) as client:
        ids = await connect_all(client.accounts, fakes, metadata=client.metadata)
        slack = ids["slack"]
        statuses, page = await _page(client, queries)
        seen = [r.result_id for r in page.results]

        fakes.slack.revoke_token()  # the user revoked the token the service holds
        statuses, page = await _page(client, queries, page.next_page_token)
        refused = statuses[slack]
        assert refused.state == pb.QUERY_STATE_NEEDS_RECONNECT
        assert PARKED_MESSAGE in refused.message
        assert page.next_page_token  # Drive goes on
        seen += [r.result_id for r in page.results]

        asked = fakes.slack.server.served
        statuses, page = await _page(client, queries, page.next_page_token)
        assert statuses[slack].state == pb.QUERY_STATE_NEEDS_RECONNECT
        assert WAITING_MESSAGE in statuses[slack].message
        assert fakes.slack.server.served == asked  # no request to a provider that refuses
        assert cpb.PROVIDER_SLACK not in _providers(page)
        seen += [r.result_id for r in page.results]

        await client.accounts.UpdateAccountCredentials(
            apb.UpdateAccountCredentialsRequest(
                account_id=slack, credentials=apb.Credentials(token=fakes.slack.token)
            ),
            metadata=client.metadata,
        )
        token = page.next_page_token
        slack_again = False
        while token:
            statuses, page = await _page(client, queries, token)
            for status in statuses.values():
                assert status.state == pb.QUERY_STATE_OK, status.message
            slack_again |= cpb.PROVIDER_SLACK in _providers(page)
            seen += [r.result_id for r in page.results]
            token = page.next_page_token
    assert slack_again
    assert len(seen) == len(set(seen)) == 2 * ITEMS


async def test_its_cursor_resumes_it_and_alone_it_does_not_keep_the_pages_coming(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    seed(fakes, items_per_word=ITEMS)
    queries = queries_for("slack", WORDS[:1])
    async with serving(fakes, tmp_path) as client:
        slack = (await connect_all(client.accounts, fakes, metadata=client.metadata))["slack"]
        _, page = await _page(client, queries)
        seen = [r.result_id for r in page.results]
        fakes.slack.revoke_token()
        statuses, page = await _page(client, queries, page.next_page_token)
        assert statuses[slack].state == pb.QUERY_STATE_NEEDS_RECONNECT
        assert not page.next_page_token  # nothing else to read: the search ends here
        waiting = [pb.NativeQuery(provider=cpb.PROVIDER_SLACK, text=queries[0].text,
                                  cursor=statuses[slack].next_cursor)]
        assert waiting[0].cursor

        statuses, page = await _page(client, waiting)
        assert statuses[slack].state == pb.QUERY_STATE_NEEDS_RECONNECT  # still flagged
        assert not page.results
        assert not page.next_page_token
        await client.accounts.UpdateAccountCredentials(
            apb.UpdateAccountCredentialsRequest(
                account_id=slack, credentials=apb.Credentials(token=fakes.slack.token)
            ),
            metadata=client.metadata,
        )
        fakes.slack.fail_status(500, times=1)  # reconnected, and the first read fails anyway
        statuses, page = await _page(client, waiting)
        assert statuses[slack].state == pb.QUERY_STATE_FAILED
        token = page.next_page_token
        assert token, "a reconnected list that failed once is carried, not left waiting"
        while token:
            statuses, page = await _page(client, waiting, token)
            assert statuses[slack].state == pb.QUERY_STATE_OK, statuses[slack].message
            seen += [r.result_id for r in page.results]
            token = page.next_page_token
    assert len(seen) == len(set(seen)) == ITEMS


async def test_a_refusal_in_flight_does_not_flag_the_account_reconnected_meanwhile(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    """A call read the old credentials, the user reconnected while its request was in flight,
    then the provider refused the old ones. The flag was set anyway: the freshly reconnected
    account showed NEEDS_RECONNECT, and a paged search kept skipping it."""
    seed(fakes, items_per_word=ITEMS)
    queries = queries_for("slack", WORDS[:1]) + queries_for("google_drive", WORDS[:1])
    async with serving(fakes, tmp_path) as client:
        slack = (await connect_all(client.accounts, fakes, metadata=client.metadata))["slack"]
        _, page = await _page(client, queries)
        seen = [r.result_id for r in page.results]
        fakes.slack.revoke_token()
        fakes.slack.slow(0.6, times=1)  # the refusal arrives after the reconnect
        in_flight = asyncio.create_task(_page(client, queries, page.next_page_token))
        await asyncio.sleep(0.3)
        await client.accounts.UpdateAccountCredentials(
            apb.UpdateAccountCredentialsRequest(
                account_id=slack, credentials=apb.Credentials(token=fakes.slack.token)
            ),
            metadata=client.metadata,
        )
        statuses, page = await in_flight
        assert statuses[slack].state == pb.QUERY_STATE_NEEDS_RECONNECT  # the old token
        seen += [r.result_id for r in page.results]
        listed = await client.search.ListAccounts(pb.ListAccountsRequest(),
                                                  metadata=client.metadata)
        states = {a.account_id: a.state for a in listed.accounts}
        assert states[slack] == pb.ACCOUNT_STATE_CONNECTED
        token = page.next_page_token
        while token:
            statuses, page = await _page(client, queries, token)
            assert statuses[slack].state == pb.QUERY_STATE_OK, statuses[slack].message
            seen += [r.result_id for r in page.results]
            token = page.next_page_token
    assert len(seen) == len(set(seen)) == 2 * ITEMS
