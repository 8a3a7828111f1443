"""Rotating the key that seals account credentials at rest.

Account credentials are sealed with SEARCH_CREDENTIALS_KEY. Changing it (a key that leaked, a
scheduled rotation) made every stored credential unopenable: every account of every tenant
answered NEEDS_RECONNECT, "stored credentials cannot be opened; reconnect the account", until
its owner connected it again. Now SEARCH_CREDENTIALS_PREVIOUS_KEYS lists keys stored
credentials still open with; a server started with them re-seals those credentials with the
current key in the background, and `search-service reseal-credentials` does the same on
demand and says what is left, after which the previous key can be dropped.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from search_client import (
    AccountState,
    AsyncSearchClient,
    FusedPage,
    NativeQuery,
    Provider,
    QueryState,
    QueryStatus,
    RetryPolicy,
)
from service.fakes.suite import FakeProviders
from service.store.base import AccountRecord, Store
from service.workspace.credentials import CredentialSealer, bound_to
from service.workspace.model import Credentials
from service.workspace.reseal import reseal_credentials
from tests.support.server import running_server

pytest_plugins = ["tests.fakes.fixtures"]

OLD_BYTES, NEW_BYTES, OTHER_BYTES = b"o" * 32, b"n" * 32, b"x" * 32
OLD, NEW, OTHER = (base64.b64encode(k).decode() for k in (OLD_BYTES, NEW_BYTES, OTHER_BYTES))
MESSAGES = 3


def _env(fakes: FakeProviders, key: str, previous: str = "") -> dict[str, str]:
    return {
        "SEARCH_EMBEDDER": "none",
        "SEARCH_ALLOW_PRIVATE_BASE_URLS": "true",
        "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true",
        "SEARCH_PROVIDER_BASE_URLS": f"slack={fakes.slack.base_url}",
        "SEARCH_CREDENTIALS_KEY": key,
        "SEARCH_CREDENTIALS_PREVIOUS_KEYS": previous,
    }


async def _search(port: int) -> tuple[QueryStatus, list[str]]:
    async with AsyncSearchClient(f"127.0.0.1:{port}", retry=RetryPolicy(max_attempts=1)) as client:
        status, ids = None, []
        async for item in client.search_workspace([NativeQuery(Provider.SLACK, "alpha")],
                                                  top_k=10, timeout=30):
            if isinstance(item, FusedPage):
                ids += [result.result_id for result in item.results]
            else:
                status = item
        assert status is not None
        return status, ids


async def _connect(fakes: FakeProviders, tmp_path: Path) -> None:
    for i in range(MESSAGES):
        fakes.slack.add_message("C1", "general", f"{1000 + i}.000000", "alpha")
    async with running_server(tmp_path, _env(fakes, OLD)) as app:
        async with AsyncSearchClient(f"127.0.0.1:{app.port}") as client:
            await client.connect_account(Provider.SLACK, "work", fakes.slack.token)
        status, ids = await _search(app.port)
        assert status.state is QueryState.OK
        assert len(ids) == MESSAGES


async def _sealed_with(store: Store, key: bytes) -> bool:
    (record,) = await store.all_accounts()
    try:
        CredentialSealer(key).open(
            record.sealed_credentials, bound_to(record.tenant, record.account_id, record.provider)
        )
    except ValueError:
        return False
    return True


async def test_a_server_with_the_previous_key_searches_and_reseals(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    await _connect(fakes, tmp_path)
    async with running_server(tmp_path, _env(fakes, NEW, f"{OLD},")) as app:
        status, ids = await _search(app.port)  # at once, whether or not re-sealed yet
        assert status.state is QueryState.OK
        assert len(ids) == MESSAGES
        store = app.components["store"]
        for _ in range(100):
            if await _sealed_with(store, NEW_BYTES):
                break
            await asyncio.sleep(0.05)
        assert await _sealed_with(store, NEW_BYTES)
        assert not await _sealed_with(store, OLD_BYTES)
    async with running_server(tmp_path, _env(fakes, NEW)) as app:  # the old key dropped
        status, ids = await _search(app.port)
        assert status.state is QueryState.OK
        assert len(ids) == MESSAGES


def _reseal(tmp_path: Path, fakes: FakeProviders, key: str, previous: str = "") -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
    env |= _env(fakes, key, previous) | {"SEARCH_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "service", "reseal-credentials"], env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )
    return done.returncode, done.stdout


async def test_the_command_reseals_and_says_what_is_left(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    await _connect(fakes, tmp_path)
    code, out = await asyncio.to_thread(_reseal, tmp_path, fakes, OTHER, NEW)  # wrong keys
    assert code == 1
    assert "0 re-sealed, 0 already sealed with the current key, 1 open with no configured" in out
    code, out = await asyncio.to_thread(_reseal, tmp_path, fakes, NEW, OLD)
    assert code == 0
    assert out.strip() == "credentials: 1 re-sealed, 0 already sealed with the current key"
    code, out = await asyncio.to_thread(_reseal, tmp_path, fakes, NEW, OLD)
    assert code == 0
    assert out.strip() == "credentials: 0 re-sealed, 1 already sealed with the current key"
    async with running_server(tmp_path, _env(fakes, NEW)) as app:
        status, ids = await _search(app.port)
        assert status.state is QueryState.OK
        assert len(ids) == MESSAGES


async def test_a_server_with_the_wrong_key_says_so_and_flags_no_account(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    """Without the previous key the credentials do not open. That is this server's key, not
    the provider refusing them: the account is not flagged NEEDS_RECONNECT in the store (it
    was, for every account searched, and ListAccounts told every user to reconnect), and a
    server with the right key searches it as before."""
    await _connect(fakes, tmp_path)
    async with running_server(tmp_path, _env(fakes, NEW)) as app:
        status, ids = await _search(app.port)
        assert status.state is QueryState.NEEDS_RECONNECT
        assert "SEARCH_CREDENTIALS_PREVIOUS_KEYS" in status.message
        assert not ids
        async with AsyncSearchClient(f"127.0.0.1:{app.port}") as client:
            (account,) = (await client.list_accounts()).accounts
        assert account.state is AccountState.CONNECTED
    async with running_server(tmp_path, _env(fakes, OLD)) as app:
        status, ids = await _search(app.port)
        assert status.state is QueryState.OK
        assert len(ids) == MESSAGES


async def test_the_sweep_reads_every_tenants_accounts_page_by_page(store: Store) -> None:
    old, other = CredentialSealer(OLD_BYTES), CredentialSealer(OTHER_BYTES)
    credentials = Credentials("xoxp-secret", scopes=("search:read",))
    for n in range(7):
        tenant, account_id = f"tenant-{n % 3}", f"acc-{n}"
        sealer = other if n == 5 else old
        await store.create_account(AccountRecord(
            account_id, tenant, "slack", f"slack {n}", "",
            sealer.seal(credentials, bound_to(tenant, account_id, "slack")),
            datetime(2026, 1, 1, tzinfo=UTC),
        ))
    rotated = CredentialSealer(NEW_BYTES, [OLD_BYTES])
    report = await reseal_credentials(store, rotated, page=2)
    assert (report.resealed, report.current, report.unopened) == (6, 0, ("acc-5",))
    again = await reseal_credentials(store, rotated, page=2)
    assert (again.resealed, again.current) == (0, 6)
    new = CredentialSealer(NEW_BYTES)
    for record in await store.all_accounts():
        bound = bound_to(record.tenant, record.account_id, record.provider)
        if record.account_id != "acc-5":
            assert new.open(record.sealed_credentials, bound) == credentials
