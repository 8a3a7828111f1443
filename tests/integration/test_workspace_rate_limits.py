"""A provider's rate limit is shared: no call, caller or replica asks again before the wait.

Through the real server and channel (and, for replicas, two server processes over one
PostgreSQL); the Slack fake counts the requests it receives.
"""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path

import pytest

from search_client import (
    AsyncSearchClient,
    NativeQuery,
    Provider,
    QueryState,
    QueryStatus,
    RetryPolicy,
)
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes import errors
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import SEARCH_PATH, q, serving
from tests.support import pg
from tests.support.serve_process import served

pytest_plugins = ["tests.fakes.fixtures"]


def _seed(fakes: FakeProviders) -> None:
    for n in range(3):
        fakes.slack.add_message("C1", "general", f"{1_700_000_000 + n}.000100", f"deploy {n}")


def _only(statuses: list[pb.QueryStatus]) -> pb.QueryStatus:
    final = [s for s in statuses if s.query_index == 0]
    assert final
    return final[-1]


def _seconds(status: pb.QueryStatus) -> float:
    return status.retry_after.seconds + status.retry_after.nanos / 1e9


async def test_a_new_search_waits_out_a_429_without_asking_the_provider(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed(fakes)
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        fakes.slack.rate_limit(30, path=SEARCH_PATH, times=1)
        request = pb.SearchWorkspaceRequest(queries=[q("deploy")])
        first = _only((await client.run(request))[0])
        assert first.state == pb.QUERY_STATE_RATE_LIMITED
        sent = fakes.slack.requests[SEARCH_PATH]
        assert sent == 1

        # A new search (no page token), and another query text: the account's resource waits.
        for text in ("deploy", "other words"):
            again = pb.SearchWorkspaceRequest(queries=[q(text)])
            status = _only((await client.run(again))[0])
            assert status.state == pb.QUERY_STATE_RATE_LIMITED
            assert 25 < _seconds(status) <= 30
        assert fakes.slack.requests[SEARCH_PATH] == sent


async def test_slack_ratelimited_in_a_200_body_is_shared_too(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed(fakes)
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        errors.slack_ratelimited(fakes.slack, retry_after=30, path=SEARCH_PATH, times=1)
        request = pb.SearchWorkspaceRequest(queries=[q("deploy")])
        assert _only((await client.run(request))[0]).state == pb.QUERY_STATE_RATE_LIMITED
        status = _only((await client.run(request))[0])
        assert status.state == pb.QUERY_STATE_RATE_LIMITED
        assert 25 < _seconds(status) <= 30
        assert fakes.slack.requests[SEARCH_PATH] == 1


async def test_requests_go_out_again_once_the_wait_is_over(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    _seed(fakes)
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        fakes.slack.rate_limit(1, path=SEARCH_PATH, times=1)
        request = pb.SearchWorkspaceRequest(queries=[q("deploy")])
        assert _only((await client.run(request))[0]).state == pb.QUERY_STATE_RATE_LIMITED
        blocked = _only((await client.run(request))[0])
        assert blocked.state == pb.QUERY_STATE_RATE_LIMITED
        assert fakes.slack.requests[SEARCH_PATH] == 1

        await asyncio.sleep(1.2)
        statuses, pages = await client.run(request)
        assert _only(statuses).state == pb.QUERY_STATE_OK
        assert pages[-1].results
        assert fakes.slack.requests[SEARCH_PATH] == 2


async def test_github_code_search_waits_while_issue_search_goes_on(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    fakes.github.add_repo("acme/api")
    fakes.github.add_issue("acme/api", 1, "Deploy step", "deploy notes")
    fakes.github.add_code("acme/api", "deploy.sh", "deploy now")
    headers = {
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset": str(int(time.time()) + 30),
        "x-ratelimit-resource": "code_search",
    }
    fakes.github.fail_call("/search/code", 1, 403, headers=headers)

    def github(kind: pb.QueryKind) -> pb.SearchWorkspaceRequest:
        query = pb.NativeQuery(provider=cpb.PROVIDER_GITHUB, text="deploy", kind=kind)
        return pb.SearchWorkspaceRequest(queries=[query])

    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes, cpb.PROVIDER_GITHUB)
        code = github(pb.QUERY_KIND_CODE)
        assert _only((await client.run(code))[0]).state == pb.QUERY_STATE_RATE_LIMITED
        assert fakes.github.requests["/search/code"] == 1

        again = _only((await client.run(code))[0])
        assert again.state == pb.QUERY_STATE_RATE_LIMITED
        assert 20 < _seconds(again) <= 30
        assert fakes.github.requests["/search/code"] == 1
        issues = _only((await client.run(github(pb.QUERY_KIND_ISSUES)))[0])
        assert issues.state == pb.QUERY_STATE_OK
        assert fakes.github.requests["/search/issues"] >= 1


DEPLOY = [NativeQuery(Provider.SLACK, "deploy")]
# Both replicas open the accounts and page tokens the other wrote.
CREDENTIALS_KEY = base64.b64encode(b"rate-limit-shared-credentials-k").decode()
PAGE_KEY = base64.b64encode(b"rate-limit-shared-page-token-key").decode()


async def _statuses(target: str) -> list[QueryState]:
    async with AsyncSearchClient(target, retry=RetryPolicy(max_attempts=1)) as client:
        return [
            item.state
            async for item in client.search_workspace(DEPLOY, top_k=5)
            if isinstance(item, QueryStatus)
        ]


@pytest.mark.postgres
async def test_two_replicas_share_the_wait(
    fakes: FakeProviders, tmp_path: Path, pg_dsn: str
) -> None:
    _seed(fakes)
    async with pg.fresh_database(pg_dsn) as dsn:
        env = {
            "SEARCH_DATABASE_URL": dsn,
            "SEARCH_PROVIDER_BASE_URLS": f"slack={fakes.slack.base_url}",
            "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true",
            "SEARCH_ALLOW_PRIVATE_BASE_URLS": "true",
            "SEARCH_CREDENTIALS_KEY": CREDENTIALS_KEY,
            "SEARCH_PAGE_TOKEN_KEY": PAGE_KEY,
            "SEARCH_DB_POOL_SIZE": "2",
        }
        with (
            served(tmp_path / "one", env) as one,
            served(tmp_path / "two", env) as two,
        ):
            async with AsyncSearchClient(one, retry=RetryPolicy(max_attempts=1)) as client:
                await client.connect_account(Provider.SLACK, "Slack", fakes.slack.token)
            fakes.slack.rate_limit(30, path=SEARCH_PATH, times=1)
            assert await _statuses(one) == [QueryState.RATE_LIMITED]
            assert fakes.slack.requests[SEARCH_PATH] == 1
            for target in (two, one, two):
                assert await _statuses(target) == [QueryState.RATE_LIMITED]
            assert fakes.slack.requests[SEARCH_PATH] == 1

