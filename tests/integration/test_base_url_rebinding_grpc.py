"""DNS rebinding of a caller's base URL, through the real server (issue 17 item 12).

ConnectAccount resolves a self-hosted base URL's host and refuses private addresses, but a
host can answer a public address then and 127.0.0.1 afterwards: the provider requests of
SearchWorkspace then reached the loopback service. The server is built with a resolver that
answers a public address (`build_app(..., resolver=...)`, what ConnectAccount sees) while
the requests resolve `localhost` for real, to the fake GitHub on 127.0.0.1: the query is
refused and nothing reaches the fake, unless SEARCH_ALLOW_PRIVATE_BASE_URLS is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import accounts_pb2_grpc as apb_grpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wpb_grpc
from service.fakes.suite import FakeProviders
from tests.support.server import channel_to, running_server

pytest_plugins = ["tests.fakes.fixtures"]

ENV = {"SEARCH_EMBEDDER": "none", "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true"}


async def first_answer_public(host: str, port: int) -> Sequence[str]:
    """The DNS answer ConnectAccount sees: public (the system resolver answers later)."""
    return ["140.82.112.3"]


async def _search_by_name(
    fakes: FakeProviders, tmp_path: Path, env: dict[str, str]
) -> tuple[wpb.QueryStatus, list[wpb.FusedPage]]:
    """Connect GitHub at `localhost` (checked against the public answer), then search it."""
    fakes.github.add_repo("octo/app")
    fakes.github.add_issue("octo/app", 7, "login bug", "the login page fails")
    base_url = fakes.github.base_url.replace("127.0.0.1", "localhost")
    async with running_server(tmp_path, ENV | env, resolver=first_answer_public) as app, \
            channel_to(app) as channel:
        accounts = apb_grpc.AccountServiceStub(channel)
        connected = await accounts.ConnectAccount(apb.ConnectAccountRequest(
            provider=cpb.PROVIDER_GITHUB, display_name="self-hosted", base_url=base_url,
            credentials=apb.Credentials(token=fakes.github.token)), timeout=30)
        assert connected.account.base_url == base_url
        search = wpb_grpc.WorkspaceSearchServiceStub(channel)
        request = wpb.SearchWorkspaceRequest(queries=[wpb.NativeQuery(
            provider=cpb.PROVIDER_GITHUB, text="is:issue bug")], top_k=5)
        messages = [m async for m in search.SearchWorkspace(request, timeout=30)]
    statuses = [m.query_status for m in messages if m.HasField("query_status")]
    assert [s.account_id for s in statuses] == [connected.account.account_id]
    return statuses[0], [m.page for m in messages if m.HasField("page")]


async def test_a_base_url_that_resolves_to_loopback_later_is_refused(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    status, pages = await _search_by_name(fakes, tmp_path, {})
    assert status.state == wpb.QUERY_STATE_FAILED, status
    assert "addresses are not allowed" in status.message
    assert not [r for page in pages for r in page.results]
    assert sum(fakes.github.requests.values()) == 0  # nothing reached the address
    assert not fakes.github.log


async def test_private_base_urls_allowed_reach_the_host_by_name(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    status, pages = await _search_by_name(
        fakes, tmp_path, {"SEARCH_ALLOW_PRIVATE_BASE_URLS": "true"})
    assert status.state == wpb.QUERY_STATE_OK, status
    assert [r.title for page in pages for r in page.results] == ["octo/app · login bug"]
    assert sum(fakes.github.requests.values()) > 0
