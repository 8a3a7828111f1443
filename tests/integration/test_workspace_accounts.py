"""Provider accounts: connect/list/disconnect on a real store, sealing, base URLs, guidance."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from service.errors import InvalidArgument, NotFound
from service.workspace.accounts import AccountManager, ConnectRequest, CredentialSealer
from service.workspace.engine import EngineSettings, WorkspaceEngine
from service.workspace.guidance import SHARED_RULES
from service.workspace.model import Credentials, Kind, ProviderId, QueryState
from service.workspace.plan import NativeQuery
from service.workspace.providers import REGISTRY
from tests.integration.workspace_support import CREDENTIALS_KEY, SIGNER, TENANT, World

pytest_plugins = ["tests.fakes.fixtures", "tests.integration.workspace_fixtures"]

GH = ProviderId.GITHUB
SLACK = ProviderId.SLACK
SECRET = "ghp_very-secret-token-0123456789"

RESOLVED = {
    "github.acme.com": ["140.82.112.3"],
    "internal.acme.com": ["10.1.2.3"],
    "loop.acme.com": ["127.0.0.1"],
    "mixed.acme.com": ["140.82.112.3", "169.254.169.254"],
    "mapped.acme.com": ["::ffff:127.0.0.1"],
}


async def fake_resolver(host: str, port: int) -> Sequence[str]:
    """Deterministic DNS for base URL checks."""
    if host not in RESOLVED:
        raise OSError("no such host")
    return RESOLVED[host]


def manager(world: World, *, allow_private: bool = False) -> AccountManager:
    """An AccountManager on the world's store with strict defaults."""
    return AccountManager(world.store, CREDENTIALS_KEY, REGISTRY, resolver=fake_resolver,
                          allow_private_base_urls=allow_private)


def connect_request(
    provider: ProviderId | None, base_url: str = "", **fields: object
) -> ConnectRequest:
    """A ConnectRequest with sane defaults."""
    values: dict[str, object] = {"display_name": "Work", "credentials": Credentials(SECRET)}
    values.update(fields)
    return ConnectRequest(provider, base_url=base_url, **values)  # type: ignore[arg-type]


async def test_connect_list_disconnect(world: World) -> None:
    accounts = manager(world)
    slack = await accounts.connect(TENANT, connect_request(SLACK, display_name="b slack"))
    gh_b = await accounts.connect(TENANT, connect_request(GH, display_name="Zed"))
    gh_a = await accounts.connect(TENANT, connect_request(GH, display_name="alpha"))
    await accounts.connect("other", connect_request(GH))
    listed = await accounts.list_accounts(TENANT)
    assert [v.account.account_id for v in listed] == [
        gh_a.account.account_id, gh_b.account.account_id, slack.account.account_id
    ]
    assert listed[0].account.base_url == "https://api.github.com"
    assert [v.account.provider for v in await accounts.list_accounts(TENANT, SLACK)] == [SLACK]
    with pytest.raises(NotFound):
        await accounts.disconnect("other", slack.account.account_id)
    await accounts.disconnect(TENANT, slack.account.account_id)
    with pytest.raises(NotFound):
        await accounts.disconnect(TENANT, slack.account.account_id)
    assert len(await accounts.list_accounts(TENANT)) == 2


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (connect_request(None), "provider"),
        (connect_request(SLACK, display_name="  "), "display_name"),
        (connect_request(SLACK, credentials=None), "credentials"),
        (connect_request(SLACK, credentials=Credentials("")), "credentials.token"),
        (connect_request(SLACK, credentials=Credentials("a b")), "credentials.token"),
        (connect_request(SLACK, credentials=Credentials("x" * 4097)), "credentials.token"),
        (connect_request(ProviderId.JIRA, credentials=Credentials("t", "a:b")),
         "credentials.username"),
        (connect_request(ProviderId.JIRA, credentials=Credentials("t", "jane@example.com")),
         "base_url"),
        (connect_request(ProviderId.CONFLUENCE, credentials=Credentials("t", "jane@acme.com")),
         "base_url"),
        (connect_request(SLACK, credentials=Credentials("t", scopes=("ok", 'a"b'))),
         "credentials.scopes[1]"),
        (connect_request(SLACK, credentials=Credentials("t", scopes=("x",) * 101)),
         "credentials.scopes"),
        (connect_request(SLACK, "https://github.acme.com"), "base_url"),
        (connect_request(GH, "http://github.acme.com"), "base_url"),
        (connect_request(GH, "https://user:pw@github.acme.com"), "base_url"),
        (connect_request(GH, "https://github.acme.com/?x=1"), "base_url"),
        (connect_request(GH, "https://internal.acme.com"), "base_url"),
        (connect_request(GH, "https://loop.acme.com"), "base_url"),
        (connect_request(GH, "https://mixed.acme.com"), "base_url"),
        (connect_request(GH, "https://mapped.acme.com"), "base_url"),
        (connect_request(GH, "https://127.0.0.1:8443"), "base_url"),
        (connect_request(GH, "https://[::1]/api"), "base_url"),
        (connect_request(GH, "https://nowhere.acme.com"), "base_url"),
    ],
)
async def test_connect_rejects_bad_input(
    world: World, request_: ConnectRequest, field: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await manager(world).connect(TENANT, request_)
    assert [v.field for v in caught.value.violations] == [field]
    assert SECRET not in str(caught.value)


async def test_self_hosted_base_urls(world: World) -> None:
    strict = manager(world)
    view = await strict.connect(TENANT, connect_request(GH, "https://github.acme.com/api/v3/"))
    assert view.account.base_url == "https://github.acme.com/api/v3"
    relaxed = manager(world, allow_private=True)
    internal = await relaxed.connect(TENANT, connect_request(ProviderId.JIRA,
                                                             "https://internal.acme.com"))
    assert internal.account.base_url == "https://internal.acme.com"


async def test_scopes_are_sealed_with_the_credentials_without_repeats(world: World) -> None:
    accounts = manager(world)
    scopes = ("search:read.public", "search:read.files", "search:read.public")
    view = await accounts.connect(
        TENANT, connect_request(SLACK, credentials=Credentials(SECRET, scopes=scopes))
    )
    (record,) = await world.store.list_accounts(TENANT)
    assert b"search:read.files" not in record.sealed_credentials
    opened = (await accounts.snapshot(TENANT)).credentials(view.account)
    assert opened.scopes == ("search:read.public", "search:read.files")


async def test_atlassian_basic_auth_with_its_site_is_accepted(world: World) -> None:
    relaxed = manager(world, allow_private=True)
    basic = Credentials(SECRET, "jane@example.com")
    view = await relaxed.connect(
        TENANT, connect_request(ProviderId.JIRA, "https://internal.acme.com", credentials=basic)
    )
    assert view.account.base_url == "https://internal.acme.com"
    oauth = await relaxed.connect(TENANT, connect_request(ProviderId.CONFLUENCE))
    assert oauth.account.base_url == "https://api.atlassian.com"


async def test_credentials_are_sealed_and_bound_to_their_account(world: World) -> None:
    accounts = manager(world)
    first = await accounts.connect(TENANT, connect_request(GH))
    second = await accounts.connect(TENANT, connect_request(GH, credentials=Credentials("other")))
    records = {r.account_id: r for r in await world.store.list_accounts(TENANT)}
    sealed = records[first.account.account_id].sealed_credentials
    assert SECRET.encode() not in sealed
    assert SECRET not in repr(records[first.account.account_id])
    snapshot = await accounts.snapshot(TENANT)
    assert snapshot.credentials(first.account).token == SECRET
    sealer = CredentialSealer(CREDENTIALS_KEY)
    with pytest.raises(ValueError, match="cannot be opened"):
        sealer.open(sealed, f"{TENANT}\x1f{second.account.account_id}\x1fgithub".encode())
    with pytest.raises(ValueError, match="cannot be opened"):
        CredentialSealer(b"z" * 32).open(sealed, f"{TENANT}\x1f{first.account.account_id}"
                                          "\x1fgithub".encode())
    assert "secret" not in repr(snapshot)
    assert SECRET not in repr(first)


async def test_undecryptable_credentials_ask_for_a_reconnect(world: World) -> None:
    account = await world.connect(SLACK)
    rotated = AccountManager(world.store, b"r" * 32, REGISTRY, allow_insecure_http=True,
                             base_url_overrides={SLACK: world.fakes.slack.base_url})
    world.engine = WorkspaceEngine(  # a server restarted with another key
        rotated, SIGNER, settings=EngineSettings(allow_insecure_http=True)
    )
    outcome = await world.search([NativeQuery(SLACK, "deploy")])
    assert outcome.latest()[(0, account)].state is QueryState.NEEDS_RECONNECT
    assert world.fakes.slack.requests["/api/assistant.search.context"] == 0


async def test_list_accounts_cards_and_guidance(world: World) -> None:
    slack = await world.connect(SLACK)
    await world.connect(GH)
    await world.connect(ProviderId.GMAIL)
    await world.store.set_account_reconnect(TENANT, slack, True)
    listing = await world.engine.list_accounts(TENANT)
    providers = [a.view.account.provider for a in listing.accounts]
    assert providers == [GH, SLACK, ProviderId.GMAIL]
    assert listing.accounts[0].kinds == (Kind.ISSUES, Kind.CODE, Kind.COMMITS, Kind.REPOSITORIES)
    assert listing.accounts[0].card == REGISTRY[GH].card
    assert listing.accounts[1].card is None
    assert [c.provider for c in listing.guidance.cards] == [GH, ProviderId.GMAIL]
    lines = listing.guidance.text.split("\n")
    assert lines[0] == SHARED_RULES
    assert [line.split(":", 1)[0] for line in lines[1:]] == ["github", "gmail"]
    assert lines[1].startswith("github: " + REGISTRY[GH].card.syntax + " Scope: ")
    only = await world.engine.list_accounts(TENANT, ProviderId.GMAIL)
    assert [c.provider for c in only.guidance.cards] == [ProviderId.GMAIL]


async def test_credentials_never_reach_logs_or_replies(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    account = await world.connect(SLACK)
    await world.connect(GH)
    world.fakes.github.fail_status(401)
    world.fakes.slack.malformed()
    outcome = await world.search([NativeQuery(SLACK, "x"), NativeQuery(GH, "y")])
    assert outcome.latest()[(0, account)].state is QueryState.FAILED
    listing = await world.engine.list_accounts(TENANT)
    for token in (world.fakes.slack.token, world.fakes.github.token):
        assert token not in caplog.text
        assert token not in repr(outcome)
        assert token not in repr(listing)
