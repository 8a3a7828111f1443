"""Validation that refuses only what cannot work, and no silent empties (issue 14, items 5-7).

Everything goes through a real gRPC server and channel with the providers faked.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import Client, q, serving
from tests.support.status import decode

pytest_plugins = ["tests.fakes.fixtures"]

GITHUB = cpb.PROVIDER_GITHUB
SLACK = cpb.PROVIDER_SLACK
SEARCH_PATH = "/api/assistant.search.context"


async def _refused(client: Client, request: pb.SearchWorkspaceRequest) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await client.run(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return caught.value


async def _connect(
    client: Client, provider: cpb.Provider, token: str, *, username: str = "",
    scopes: tuple[str, ...] = (), base_url: str = "", name: str = "work",
) -> apb.ConnectAccountResponse:
    request = apb.ConnectAccountRequest(
        provider=provider, display_name=name, base_url=base_url,
        credentials=apb.Credentials(token=token, username=username, scopes=scopes),
    )
    reply: apb.ConnectAccountResponse = await client.accounts.ConnectAccount(
        request, metadata=client.metadata
    )
    return reply


# ---- request shape --------------------------------------------------------------------------


async def test_too_many_queries_is_invalid_argument_naming_queries(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        error = await _refused(
            client, pb.SearchWorkspaceRequest(queries=[q(f"t{i}") for i in range(33)])
        )
    decoded = decode(error)
    assert [field for field, _ in decoded.violations] == ["queries"]
    assert decoded.info is not None
    assert decoded.info.reason == "INVALID_ARGUMENT"
    assert decoded.info.metadata["limit"] == "32"
    assert decoded.retry_delay is None


# ---- duplicates -----------------------------------------------------------------------------


async def test_the_same_text_on_two_different_accounts_searches_both(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    fakes.slack.add_message("C1", "general", "100.000000", "deploy freeze")
    async with serving(fakes, tmp_path) as client:
        first = await client.connect(fakes)
        second = await client.connect(fakes)
        statuses, pages = await client.run(pb.SearchWorkspaceRequest(queries=[
            q("deploy", account_id=first), q("deploy", account_id=second),
        ]))
        assert {(s.query_index, s.account_id) for s in statuses} == {(0, first), (1, second)}
        assert {s.state for s in statuses} == {pb.QUERY_STATE_OK}
        assert len(pages[0].results[0].contributions) == 2
        overlapping = await _refused(client, pb.SearchWorkspaceRequest(queries=[
            q("deploy", account_id=second), q("Deploy"),  # every account includes `second`
        ]))
        assert [field for field, _ in decode(overlapping).violations] == ["queries[1]"]


async def test_gmail_upper_and_lower_case_or_are_different_queries(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    gmail = cpb.PROVIDER_GMAIL
    async with serving(fakes, tmp_path) as client:
        statuses, _ = await client.run(pb.SearchWorkspaceRequest(queries=[
            q("budget OR forecast", provider=gmail), q("budget or forecast", provider=gmail),
        ]))
        assert {s.query_index for s in statuses} == {0, 1}
        same = await _refused(client, pb.SearchWorkspaceRequest(queries=[
            q("budget OR forecast", provider=gmail), q(" budget  OR forecast", provider=gmail),
        ]))
        assert [field for field, _ in decode(same).violations] == ["queries[1]"]


# ---- GitHub ---------------------------------------------------------------------------------


async def test_github_qualifiers_do_not_count_against_256_characters(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    fakes.github.add_repo("acme/api")
    word = "x" * 240
    fakes.github.add_issue("acme/api", 1, f"{word} crash")
    text = f"{word} repo:acme/api is:issue is:open label:bug-report author:octocat"
    assert len(text) > 256
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes, GITHUB)
        statuses, pages = await client.run(pb.SearchWorkspaceRequest(queries=[
            q(text.replace(" label:bug-report author:octocat", ""), provider=GITHUB,
              kind=pb.QUERY_KIND_ISSUES),
            q(text, provider=GITHUB, kind=pb.QUERY_KIND_COMMITS),
        ]))
        assert {s.state for s in statuses} == {pb.QUERY_STATE_OK}
        assert [r.title for r in pages[0].results] == [f"acme/api · {word} crash"]
        too_long = await _refused(client, pb.SearchWorkspaceRequest(queries=[
            q("y" * 257 + " repo:acme/api", provider=GITHUB, kind=pb.QUERY_KIND_ISSUES),
        ]))
        assert [field for field, _ in decode(too_long).violations] == ["queries[0].text"]


@pytest.mark.parametrize("text", ["login OR signin", "login AND signin", "login NOT test"])
async def test_github_code_search_with_booleans_is_refused_on_its_text(
    fakes: FakeProviders, tmp_path: Path, text: str
) -> None:
    fakes.github.add_repo("acme/api")
    fakes.github.add_code("acme/api", "src/login.py", "def login(): signin()")
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes, GITHUB)
        error = await _refused(client, pb.SearchWorkspaceRequest(
            queries=[q(text, provider=GITHUB, kind=pb.QUERY_KIND_CODE)]
        ))
    ((field, description),) = decode(error).violations
    assert field == "queries[0].text"
    assert "AND/OR/NOT" in description
    assert "separate" in description
    assert fakes.github.requests["/search/code"] == 0


async def test_kindless_github_with_or_searches_issues_and_says_code_was_skipped(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    fakes.github.add_repo("acme/api")
    fakes.github.add_issue("acme/api", 1, "login broken")
    fakes.github.add_code("acme/api", "src/login.py", "def login(): pass")
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes, GITHUB)
        statuses, pages = await client.run(pb.SearchWorkspaceRequest(
            queries=[q("login OR signin", provider=GITHUB)]
        ))
    assert statuses[-1].state == pb.QUERY_STATE_OK
    assert statuses[-1].message.count("code search was skipped") == 1  # said once
    assert [r.url for r in pages[0].results] == ["https://github.com/acme/api/issues/1"]
    assert fakes.github.requests["/search/code"] == 0


# ---- Slack ----------------------------------------------------------------------------------


async def test_slack_or_is_searched_with_a_hint_not_refused(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    fakes.slack.add_message("C1", "general", "100.000000", "trip plan")
    fakes.slack.add_message("C1", "general", "200.000000", "travel budget")
    async with serving(fakes, tmp_path) as client:
        await client.connect(fakes)
        statuses, pages = await client.run(pb.SearchWorkspaceRequest(
            queries=[q("trip OR travel"), q('"trip OR travel" plan'), q("trip")]
        ))
    final = {s.query_index: s for s in statuses}
    assert {s.state for s in final.values()} == {pb.QUERY_STATE_OK}
    hint = "Slack keyword search does not support OR; send the alternatives as separate"
    assert hint in final[0].message
    assert hint not in final[1].message  # OR inside a phrase is a word
    assert hint not in final[2].message
    assert fakes.slack.requests[SEARCH_PATH] == 3
    assert [r.title for r in pages[0].results] == ["#general"]


async def test_slack_scopes_reach_file_search(fakes: FakeProviders, tmp_path: Path) -> None:
    fakes.slack.add_file("F1", "roadmap.pdf", "the quarterly roadmap", updated=100)
    fakes.slack.add_message("C1", "general", "200.000000", "roadmap review")
    async with serving(fakes, tmp_path) as client:
        plain = await client.connect(fakes)
        scoped = (await _connect(
            client, SLACK, fakes.slack.token, name="files",
            scopes=("search:read.public", "search:read.files", "search:read.public"),
        )).account.account_id
        statuses, pages = await client.run(pb.SearchWorkspaceRequest(queries=[
            q("roadmap", account_id=plain), q("roadmap review", account_id=scoped),
            q("quarterly", account_id=scoped),
        ]))
        assert {s.state for s in statuses} == {pb.QUERY_STATE_OK}
        kinds = {(c.query_index, r.kind) for r in pages[0].results for c in r.contributions}
        assert kinds == {(0, "message"), (1, "message"), (2, "file")}
        for scopes, field in [
            (("search:read.public", "bad scope"), "credentials.scopes[1]"),
            (("",), "credentials.scopes[0]"),
            (("s" * 201,), "credentials.scopes[0]"),
            (tuple(f"scope:{i}" for i in range(101)), "credentials.scopes"),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _connect(client, SLACK, fakes.slack.token, scopes=scopes)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert [f for f, _ in decode(caught.value).violations] == [field]


async def test_slack_scopes_without_public_search_fail_naming_it_and_keep_the_card(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    fakes.slack.add_message("C1", "general", "200.000000", "roadmap review")
    async with serving(fakes, tmp_path) as client:
        account = (await _connect(
            client, SLACK, fakes.slack.token, name="dm only", scopes=("search:read.im",),
        )).account.account_id
        statuses, (page,) = await client.run(
            pb.SearchWorkspaceRequest(queries=[q("roadmap", account_id=account)])
        )
        listed = await client.search.ListAccounts(pb.ListAccountsRequest(),
                                                  metadata=client.metadata)
    (status,) = statuses
    assert status.state == pb.QUERY_STATE_FAILED  # a missing scope, not a refused credential
    assert "search:read.public" in status.message
    assert [c.provider for c in page.cards] == [SLACK]
    assert fakes.slack.requests["/api/assistant.search.context"] == 0  # no call was sent
    (shown,) = listed.accounts
    assert shown.state == pb.ACCOUNT_STATE_CONNECTED
    assert shown.HasField("card")


# ---- Atlassian basic auth -------------------------------------------------------------------


@pytest.mark.parametrize("provider", [cpb.PROVIDER_JIRA, cpb.PROVIDER_CONFLUENCE])
async def test_atlassian_basic_auth_needs_the_site_base_url(
    fakes: FakeProviders, tmp_path: Path, provider: cpb.Provider
) -> None:
    async with serving(fakes, tmp_path) as client:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _connect(client, provider, "api-token-secret", username="jane@example.com")
        decoded = decode(caught.value)
        assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT
        ((field, description),) = decoded.violations
        assert field == "base_url"
        assert "atlassian.net" in description
        assert "api-token-secret" not in str(caught.value)
        oauth = await _connect(client, provider, "oauth-access-token")  # api.atlassian.com
        assert oauth.account.account_id
