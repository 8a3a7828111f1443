"""The client's workspace search and accounts against the real server and fake providers."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from search_client import (
    AccountState,
    AsyncSearchClient,
    FusedPage,
    InvalidArgumentError,
    NativeQuery,
    NotFoundError,
    Provider,
    QueryKind,
    QueryState,
    QueryStatus,
    RetryPolicy,
    SearchClient,
)
from service.api.interceptor import CallObserver
from service.fakes.suite import FakeProviders
from tests.support.server import running_server

ISSUES = 5
ENV = {"SEARCH_ALLOW_PRIVATE_BASE_URLS": "true", "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true"}
SLACK_SEARCH = "/api/assistant.search.context"
MESSAGES = 30
TOP_K = 5
# Pages that hold results, the page the 429 empties, and at most two that wait it out.
MOST_CALLS = MESSAGES // TOP_K + 3


def _seed(fakes: FakeProviders) -> None:
    fakes.github.add_repo("acme/api")
    for number in range(1, ISSUES + 1):
        fakes.github.add_issue(
            "acme/api", number, f"Deploy step {number}", "deploy notes",
            updated_at=f"2024-01-{number:02d}T00:00:00Z",
        )


async def test_connect_list_search_and_disconnect(tmp_path: Path, fakes: FakeProviders) -> None:
    _seed(fakes)
    async with (
        running_server(tmp_path, env=ENV) as app,
        AsyncSearchClient(f"127.0.0.1:{app.port}", retry=RetryPolicy(max_attempts=1)) as client,
    ):
        account = await client.connect_account(
            Provider.GITHUB, "GitHub (test)", fakes.github.token, base_url=fakes.github.base_url
        )
        assert account.provider is Provider.GITHUB
        assert account.state is AccountState.CONNECTED
        assert QueryKind.ISSUES in account.kinds
        assert account.card is not None

        listed = await client.list_accounts()
        assert [a.account_id for a in listed.accounts] == [account.account_id]
        assert [c.provider for c in listed.guidance.cards] == [Provider.GITHUB]
        assert listed.guidance.text

        queries = [NativeQuery(Provider.GITHUB, "deploy", kind=QueryKind.ISSUES,
                               account_id=account.account_id)]
        events = [e async for e in client.search_workspace(queries, top_k=2)]
        statuses = [e for e in events if isinstance(e, QueryStatus)]
        (page,) = [e for e in events if isinstance(e, FusedPage)]
        assert statuses
        assert statuses[-1].state is QueryState.OK
        latest = {(s.query_index, s.account_id): s for s in statuses}
        assert page.statuses == tuple(latest.values())
        assert len(page.results) == 2
        assert page.next_page_token
        assert page.results[0].contributions[0].rank == 1
        assert page.rrf_k == 60

        ids = [r.result_id async for r in client.iter_workspace_results(queries, top_k=2)]
        assert len(ids) == ISSUES
        assert len(set(ids)) == ISSUES

        with pytest.raises(InvalidArgumentError) as duplicate:
            await anext(client.search_workspace([queries[0], queries[0]]))
        assert any(v.field.startswith("queries[1]") for v in duplicate.value.field_violations)

        await client.disconnect_account(account.account_id)
        with pytest.raises(NotFoundError) as gone:
            await client.disconnect_account(account.account_id)
        assert gone.value.reason == "ACCOUNT_NOT_FOUND"


class CallCounter(CallObserver):
    """Counts the server's finished calls by method name."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def observe(self, method: str, code: str, seconds: float) -> None:
        """Record a finished call."""
        self.calls[method.rsplit("/", 1)[-1]] += 1


@asynccontextmanager
async def slack_server(
    tmp_path: Path, fakes: FakeProviders
) -> AsyncIterator[tuple[str, CallCounter]]:
    """A server whose Slack is the fake, with 30 "deploy" messages; its target and counter."""
    for n in range(MESSAGES):
        fakes.slack.add_message("C1", "general", f"{1_700_000_000 + n}.000100", f"deploy {n}")
    env = {**ENV, "SEARCH_PROVIDER_BASE_URLS": f"slack={fakes.slack.base_url}"}
    counter = CallCounter()
    async with running_server(tmp_path, env=env, observer=counter) as app:
        yield f"127.0.0.1:{app.port}", counter


def rate_limit_second_read(fakes: FakeProviders) -> None:
    """The second Slack search request (the first of the second page) answers 429, wait 1 s."""
    fakes.slack.fail_call(SLACK_SEARCH, 2, 429, headers={"Retry-After": "1"})


DEPLOY = [NativeQuery(Provider.SLACK, "deploy")]


async def test_async_pages_wait_out_a_rate_limit_instead_of_calling_in_a_loop(
    tmp_path: Path, fakes: FakeProviders
) -> None:
    async with (
        slack_server(tmp_path, fakes) as (target, counter),
        AsyncSearchClient(target, retry=RetryPolicy(max_attempts=1)) as client,
    ):
        await client.connect_account(Provider.SLACK, "Slack", fakes.slack.token)
        rate_limit_second_read(fakes)
        started = time.monotonic()
        pages = [page async for page in client.iter_workspace_pages(DEPLOY, top_k=TOP_K)]
        elapsed = time.monotonic() - started
    waiting = [page for page in pages if not page.results]
    assert waiting  # the page the 429 emptied, and any that waited the limit out
    assert all(page.next_page_token for page in waiting)
    assert any(s.state is QueryState.RATE_LIMITED and s.retry_after for s in waiting[0].statuses)
    urls = [result.url for page in pages for result in page.results]
    assert len(urls) == len(set(urls)) == MESSAGES  # nothing lost, nothing twice
    assert counter.calls["SearchWorkspace"] == len(pages) <= MOST_CALLS
    assert elapsed >= 1.0  # the provider's wait was waited out, not polled


async def test_sync_results_wait_out_a_rate_limit_instead_of_calling_in_a_loop(
    tmp_path: Path, fakes: FakeProviders
) -> None:
    async with slack_server(tmp_path, fakes) as (target, counter):

        def run() -> tuple[list[str], float]:
            with SearchClient(target, retry=RetryPolicy(max_attempts=1)) as client:
                client.connect_account(Provider.SLACK, "Slack", fakes.slack.token)
                rate_limit_second_read(fakes)
                started = time.monotonic()
                urls = [r.url for r in client.iter_workspace_results(DEPLOY, top_k=TOP_K)]
                return urls, time.monotonic() - started

        urls, elapsed = await asyncio.to_thread(run)
    assert len(urls) == len(set(urls)) == MESSAGES
    assert counter.calls["SearchWorkspace"] <= MOST_CALLS
    assert elapsed >= 1.0


async def test_connect_account_sends_the_granted_scopes(
    tmp_path: Path, fakes: FakeProviders
) -> None:
    fakes.slack.add_file("F1", "deploy runbook", "how we deploy", updated=1_700_000_000)
    async with (
        slack_server(tmp_path, fakes) as (target, _),
        AsyncSearchClient(target, retry=RetryPolicy(max_attempts=1)) as client,
    ):
        await client.connect_account(
            Provider.SLACK, "Slack", fakes.slack.token,
            scopes=["search:read.public", "search:read.files"],
        )
        page = await anext(client.iter_workspace_pages(DEPLOY, top_k=50))
        with pytest.raises(InvalidArgumentError) as bad:
            await client.connect_account(Provider.SLACK, "Slack", "t", scopes=["no spaces"])
    assert "https://acme.slack.com/files/U1/F1" in {r.url for r in page.results}
    assert [v.field for v in bad.value.field_violations] == ["credentials.scopes[0]"]


async def test_update_account_credentials_brings_the_account_back(
    tmp_path: Path, fakes: FakeProviders
) -> None:
    refresh, expires = "xoxe-1-client-refresh", datetime(2031, 1, 2, 3, 4, 5)  # naive: UTC
    async with (
        slack_server(tmp_path, fakes) as (target, _),
        AsyncSearchClient(target, retry=RetryPolicy(max_attempts=1)) as client,
    ):
        account = await client.connect_account(Provider.SLACK, "Slack", "xoxp-revoked")
        assert (account.credentials_expire_time, account.refreshable) == (None, False)
        page = await anext(client.iter_workspace_pages(DEPLOY, top_k=5))
        assert page.statuses[-1].state is QueryState.NEEDS_RECONNECT
        updated = await client.update_account_credentials(
            account.account_id, fakes.slack.token, refresh_token=refresh, expire_time=expires
        )
        assert (updated.account_id, updated.state) == (account.account_id, AccountState.CONNECTED)
        assert updated.credentials_expire_time == expires.replace(tzinfo=UTC)
        assert updated.refreshable
        (listed,) = (await client.list_accounts()).accounts
        assert listed == updated
        page = await anext(client.iter_workspace_pages(DEPLOY, top_k=5))
        assert page.statuses[-1].state is QueryState.OK
        with pytest.raises(NotFoundError):
            await client.update_account_credentials("acc_unknown", fakes.slack.token)

        def blocking() -> bool:
            with SearchClient(target, retry=RetryPolicy(max_attempts=1)) as sync:
                again = sync.update_account_credentials(account.account_id, fakes.slack.token)
                return again.refreshable

        assert await asyncio.to_thread(blocking) is False  # replaced: no refresh token now
