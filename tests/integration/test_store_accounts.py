"""Provider accounts: stored sealed, scoped by tenant."""

from __future__ import annotations

from dataclasses import replace

import pytest

from service import errors
from service.store.base import AccountRecord, Store
from tests.integration.conftest import at


def _account(account_id: str, tenant: str = "acme", day: int = 1) -> AccountRecord:
    return AccountRecord(
        account_id=account_id,
        tenant=tenant,
        provider="github",
        display_name=f"GitHub {account_id}",
        base_url="https://github.example.com/api/v3",
        sealed_credentials=b"\x00sealed\xff",
        created_at=at(day),
    )


async def test_accounts_round_trip(store: Store) -> None:
    await store.create_account(_account("a1"))
    await store.create_account(_account("a2", day=2))
    await store.create_account(_account("b1", tenant="globex"))
    with pytest.raises(errors.AlreadyExists):
        await store.create_account(_account("a1"))

    assert await store.list_accounts("acme") == [_account("a1"), _account("a2", day=2)]
    assert await store.all_accounts() == [  # maintenance (re-sealing): every tenant's
        _account("a1"), _account("a2", day=2), _account("b1", tenant="globex")
    ]
    assert await store.all_accounts("a1", 1) == [_account("a2", day=2)]  # by id, a page
    assert await store.all_accounts("a2", 5) == [_account("b1", tenant="globex")]
    assert await store.all_accounts("b1", 5) == []

    await store.set_account_reconnect("acme", "a2", True)
    await store.set_account_reconnect("acme", "b1", True)  # another tenant's: no effect
    flagged = {a.account_id: a.needs_reconnect for a in await store.list_accounts("acme")}
    assert flagged == {"a1": False, "a2": True}
    assert [a.needs_reconnect for a in await store.list_accounts("globex")] == [False]
    await store.set_account_reconnect("acme", "a2", False)
    assert not any(a.needs_reconnect for a in await store.list_accounts("acme"))

    assert await store.delete_account("acme", "b1") is False
    assert await store.delete_account("acme", "a1") is True
    assert await store.delete_account("acme", "a1") is False
    assert [a.account_id for a in await store.list_accounts("acme")] == ["a2"]


async def test_replacing_credentials_keeps_the_row_and_its_tenant(store: Store) -> None:
    await store.create_account(_account("a1"))
    await store.create_account(_account("b1", tenant="globex"))
    await store.set_account_reconnect("acme", "a1", True)

    # Without a flag the reconnect state stays as it was.
    assert await store.replace_account_credentials("acme", "a1", b"\x01new") is True
    assert await store.list_accounts("acme") == [
        replace(_account("a1"), sealed_credentials=b"\x01new", needs_reconnect=True)
    ]

    assert await store.replace_account_credentials(
        "acme", "a1", b"\x02newer", needs_reconnect=False
    ) is True
    [cleared] = await store.list_accounts("acme")
    assert (cleared.sealed_credentials, cleared.needs_reconnect) == (b"\x02newer", False)

    # Another tenant's account and an unknown one are not found and not touched.
    assert await store.replace_account_credentials("acme", "b1", b"stolen") is False
    assert await store.replace_account_credentials("acme", "nope", b"x") is False
    assert [a.sealed_credentials for a in await store.list_accounts("globex")] == [
        b"\x00sealed\xff"
    ]


async def test_a_refusal_flags_only_the_credentials_it_refused(store: Store) -> None:
    """A search flags the credentials it read; a reconnect that stored others meanwhile wins."""
    await store.create_account(_account("a1"))
    await store.replace_account_credentials("acme", "a1", b"\x01reconnected", needs_reconnect=False)
    await store.set_account_reconnect("acme", "a1", True, sealed=b"\x00sealed\xff")  # the old
    [kept] = await store.list_accounts("acme")
    assert not kept.needs_reconnect
    await store.set_account_reconnect("acme", "a1", True, sealed=b"\x01reconnected")
    [flagged] = await store.list_accounts("acme")
    assert flagged.needs_reconnect
