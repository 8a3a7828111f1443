"""Credentials with a lifecycle on a real store: sealed refresh token and expiry, replace."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from service.errors import InvalidArgument, NotFound
from service.workspace.accounts import AccountManager, ConnectRequest
from service.workspace.credentials import CredentialSealer, bound_to
from service.workspace.model import Credentials, ProviderId
from service.workspace.providers import REGISTRY
from tests.integration.workspace_support import CREDENTIALS_KEY, TENANT, World

pytest_plugins = ["tests.fakes.fixtures", "tests.integration.workspace_fixtures"]

SLACK = ProviderId.SLACK
ACCESS = "xoxp-access-token-0123456789"
REFRESH = "xoxe-1-refresh-token-0123456789"
EXPIRES = datetime(2030, 5, 1, 12, 30, tzinfo=UTC)
BOUND = b"t\x1facc_1\x1fslack"


def manager(world: World) -> AccountManager:
    """An AccountManager on the world's store."""
    return AccountManager(world.store, CREDENTIALS_KEY, REGISTRY)


def test_the_sealed_blob_carries_the_refresh_token_and_expiry() -> None:
    sealer = CredentialSealer(CREDENTIALS_KEY)
    given = Credentials(ACCESS, scopes=("a", "b"), refresh_token=REFRESH, expires_at=EXPIRES)
    sealed = sealer.seal(given, BOUND)
    assert REFRESH.encode() not in sealed
    assert sealer.open(sealed, BOUND) == given
    assert sealer.open(sealed, BOUND).refreshable
    paris = EXPIRES.astimezone(ZoneInfo("Europe/Paris"))
    opened = sealer.open(sealer.seal(Credentials(ACCESS, expires_at=paris), BOUND), BOUND)
    assert opened.expires_at is not None
    assert (opened.expires_at, opened.expires_at.utcoffset()) == (EXPIRES, timedelta(0))
    assert REFRESH not in repr(given)


def test_a_blob_sealed_before_refresh_tokens_existed_still_opens() -> None:
    key = b"k" * 32  # a raw AES-256 key: the sealer uses it as it is
    nonce = os.urandom(12)
    plain = json.dumps({"t": ACCESS, "u": "", "s": ["x"]}).encode()  # the layout before issue 15
    old = b"\x01" + nonce + AESGCM(key).encrypt(nonce, plain, BOUND)
    opened = CredentialSealer(key).open(old, BOUND)
    assert opened == Credentials(ACCESS, scopes=("x",))
    assert (opened.refresh_token, opened.expires_at, opened.refreshable) == ("", None, False)


def test_a_blob_opened_again_is_the_same_and_the_binding_still_holds() -> None:
    """Opened blobs are remembered (each search opens every account's): a second open gives
    the same credentials, and the remembered plaintext never opens for another account, for
    another key or for a tampered blob."""
    sealer = CredentialSealer(CREDENTIALS_KEY)
    given = Credentials(ACCESS, refresh_token=REFRESH, expires_at=EXPIRES)
    sealed = sealer.seal(given, BOUND)
    assert sealer.open(sealed, BOUND) == given
    assert sealer.open(sealed, BOUND) is sealer.open(sealed, BOUND)
    for blob, bound, opener in (
        (sealed, b"t\x1facc_2\x1fslack", sealer),
        (sealed, BOUND, CredentialSealer(b"another key of enough bytes")),
        (sealed[:-1] + bytes([sealed[-1] ^ 1]), BOUND, sealer),
    ):
        with pytest.raises(ValueError, match="cannot be opened"):
            opener.open(blob, bound)
    for n in range(1100):  # past the bound: the oldest are forgotten, each still opens
        sealer.open(sealer.seal(Credentials(f"token-{n}"), BOUND), BOUND)
    assert sealer.open(sealed, BOUND) == given


async def test_replace_keeps_the_id_and_clears_the_reconnect_flag(world: World) -> None:
    accounts = manager(world)
    first = await accounts.connect(
        TENANT, ConnectRequest(SLACK, "Work", credentials=Credentials("old-token"))
    )
    account_id = first.account.account_id
    assert (first.expires_at, first.refreshable) == (None, False)
    await accounts.mark_reconnect(TENANT, account_id, True)

    fresh = Credentials(ACCESS, scopes=("s", "s"), refresh_token=REFRESH, expires_at=EXPIRES)
    view = await accounts.replace_credentials(TENANT, account_id, fresh)
    assert view.account.account_id == account_id
    assert not view.account.needs_reconnect
    assert (view.expires_at, view.refreshable, view.created_at) == (
        EXPIRES, True, first.created_at
    )
    (listed,) = await accounts.list_accounts(TENANT)
    assert listed == view
    opened = (await accounts.snapshot(TENANT)).credentials(listed.account)
    assert opened == Credentials(ACCESS, scopes=("s",), refresh_token=REFRESH, expires_at=EXPIRES)


async def test_replace_without_clearing_keeps_the_reconnect_flag(world: World) -> None:
    accounts = manager(world)
    account_id = await world.connect(SLACK)
    await accounts.mark_reconnect(TENANT, account_id, True)
    view = await accounts.replace_credentials(
        TENANT, account_id, Credentials(ACCESS), clear_reconnect=False
    )
    assert view.account.needs_reconnect
    (listed,) = await accounts.list_accounts(TENANT)
    assert listed.account.needs_reconnect
    # A refresh that only renews the access token drops nothing it was not given.
    assert (listed.refreshable, listed.expires_at) == (False, None)


async def test_replace_finds_only_the_tenants_own_accounts(world: World) -> None:
    accounts = manager(world)
    theirs = await world.connect(SLACK, tenant="other")
    for tenant, account_id in [(TENANT, theirs), (TENANT, "acc_unknown")]:
        with pytest.raises(NotFound) as caught:
            await accounts.replace_credentials(tenant, account_id, Credentials(ACCESS))
        assert caught.value.reason == "ACCOUNT_NOT_FOUND"
    (kept,) = await accounts.list_accounts("other")
    snapshot = await accounts.snapshot("other")
    assert snapshot.credentials(kept.account).token == world.fakes.slack.token


@pytest.mark.parametrize(
    ("account_id", "credentials", "fields"),
    [
        ("", Credentials(ACCESS), ["account_id"]),
        ("acc_x", Credentials(""), ["credentials.token"]),
        ("acc_x", Credentials(ACCESS, refresh_token="has space"), ["credentials.refresh_token"]),
        ("acc_x", Credentials(ACCESS, refresh_token="r" * 4097), ["credentials.refresh_token"]),
        ("acc_x", Credentials(ACCESS, "jane@example.com", refresh_token=REFRESH),
         ["credentials.refresh_token"]),
        ("acc_x", Credentials(ACCESS, expires_at=datetime(1970, 1, 1, 1, tzinfo=UTC)),
         ["credentials.expire_time"]),
        ("acc_x", Credentials(ACCESS, expires_at=datetime(2030, 1, 1)),  # naive
         ["credentials.expire_time"]),
        ("acc_x", Credentials(ACCESS, scopes=("ok", "no space"), refresh_token="bad token"),
         ["credentials.scopes[1]", "credentials.refresh_token"]),
    ],
)
async def test_replace_refuses_bad_input_before_looking_up(
    world: World, account_id: str, credentials: Credentials, fields: list[str]
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await manager(world).replace_credentials(TENANT, account_id, credentials)
    assert [v.field for v in caught.value.violations] == fields
    assert REFRESH not in str(caught.value)


async def test_expiry_more_than_ten_years_ahead_is_refused(world: World) -> None:
    far = datetime.now(UTC) + timedelta(days=3660)
    with pytest.raises(InvalidArgument) as caught:
        await manager(world).replace_credentials(
            TENANT, "acc_x", Credentials(ACCESS, expires_at=far)
        )
    assert [v.field for v in caught.value.violations] == ["credentials.expire_time"]
    past = datetime.now(UTC) - timedelta(hours=1)  # expired already: accepted (renewed on use)
    account_id = await world.connect(SLACK)
    view = await manager(world).replace_credentials(
        TENANT, account_id, Credentials(ACCESS, refresh_token=REFRESH, expires_at=past)
    )
    assert view.expires_at == past


async def test_basic_auth_needs_a_site_on_replace_too(world: World) -> None:
    oauth = await world.connect(ProviderId.JIRA)  # api.atlassian.com: no site of its own
    with pytest.raises(InvalidArgument) as caught:
        await manager(world).replace_credentials(
            TENANT, oauth, Credentials(ACCESS, "jane@example.com")
        )
    assert [v.field for v in caught.value.violations] == ["credentials.username"]


async def test_connect_takes_a_refresh_token_and_expiry(world: World) -> None:
    accounts = manager(world)
    given = Credentials(ACCESS, refresh_token=REFRESH, expires_at=EXPIRES)
    view = await accounts.connect(TENANT, ConnectRequest(SLACK, "Work", credentials=given))
    assert (view.expires_at, view.refreshable) == (EXPIRES, True)
    (listed,) = await accounts.list_accounts(TENANT)
    assert (listed.expires_at, listed.refreshable) == (EXPIRES, True)
    assert REFRESH not in repr(listed)
    (record,) = await world.store.list_accounts(TENANT)
    sealer = CredentialSealer(CREDENTIALS_KEY)
    bound = bound_to(TENANT, record.account_id, "slack")
    assert sealer.open(record.sealed_credentials, bound).refresh_token == REFRESH
