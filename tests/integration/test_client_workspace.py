"""The client's workspace search and accounts against the real server and a fake GitHub."""

from __future__ import annotations

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
)
from tests.fakes.suite import FakeProviders
from tests.support.server import running_server

ISSUES = 5
ENV = {"SEARCH_ALLOW_PRIVATE_BASE_URLS": "true", "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true"}


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
