"""A caller's base URL stays off private addresses at request time too (issue 17 item 12).

ConnectAccount checks what a base URL's host resolves to, but a host can resolve to a public
address then and to 127.0.0.1 afterwards (DNS rebinding): provider requests then reached
the loopback service. Now every resolution for such an account is checked before a
connection is opened; operator-configured origins (SEARCH_PROVIDER_BASE_URLS) and
SEARCH_ALLOW_PRIVATE_BASE_URLS are not affected.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.workspace.accounts import AccountManager, ConnectRequest
from service.workspace.engine import EngineSettings, WorkspaceEngine
from service.workspace.model import Credentials, ProviderId, QueryState
from service.workspace.plan import NativeQuery
from service.workspace.providers import REGISTRY
from tests.integration.workspace_support import CREDENTIALS_KEY, SIGNER, TENANT, World

pytest_plugins = ["tests.fakes.fixtures", "tests.integration.workspace_fixtures"]

GH = ProviderId.GITHUB


async def first_answer_public(host: str, port: int) -> Sequence[str]:
    """The DNS answer ConnectAccount sees: public (the system resolver answers later)."""
    return ["140.82.112.3"]


def _rebinding_world(world: World, *, allow_private: bool) -> World:
    accounts = AccountManager(world.store, CREDENTIALS_KEY, REGISTRY, resolver=first_answer_public,
                              allow_private_base_urls=allow_private, allow_insecure_http=True)
    engine = WorkspaceEngine(accounts, SIGNER, settings=EngineSettings(allow_insecure_http=True))
    return World(world.fakes, world.store, accounts, engine)


async def _connect_by_name(world: World) -> str:
    # `localhost` resolves to the fake on 127.0.0.1 once requests start.
    base_url = world.fakes.github.base_url.replace("127.0.0.1", "localhost")
    request = ConnectRequest(GH, "self-hosted", base_url, Credentials(world.fakes.github.token))
    return (await world.accounts.connect(TENANT, request)).account.account_id


async def test_a_base_url_that_resolves_to_loopback_later_is_refused(world: World) -> None:
    rebinding = _rebinding_world(world, allow_private=False)
    account = await _connect_by_name(rebinding)
    outcome = await rebinding.search([NativeQuery(GH, "is:issue bug")])
    status = outcome.latest()[(0, account)]
    assert status.state is QueryState.FAILED
    assert "addresses are not allowed" in status.message
    assert sum(world.fakes.github.requests.values()) == 0  # nothing reached the address


async def test_private_base_urls_allowed_still_reach_the_host(world: World) -> None:
    allowed = _rebinding_world(world, allow_private=True)
    account = await _connect_by_name(allowed)
    outcome = await allowed.search([NativeQuery(GH, "is:issue bug")])
    assert outcome.latest()[(0, account)].state is QueryState.OK
