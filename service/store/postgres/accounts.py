"""Provider accounts (credentials arrive sealed; the store never reads them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from service import errors
from service.store.base import AccountRecord
from service.store.postgres.codecs import clean_text, utc
from service.store.postgres.pool import Conn

ACCOUNT_COLUMNS = (
    "account_id, tenant, provider, display_name, base_url, sealed_credentials, created_at,"
    " needs_reconnect"
)
CREATE_ACCOUNT = f"""
INSERT INTO accounts ({ACCOUNT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"""  # noqa: S608 - only constant fragments are interpolated
LIST_ACCOUNTS = f"""
SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE tenant = $1 ORDER BY created_at, account_id"""  # noqa: S608 - only constant fragments are interpolated
ALL_ACCOUNTS = f"""
SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE account_id > $1 ORDER BY account_id LIMIT $2"""  # noqa: S608 - only constant fragments are interpolated
DELETE_ACCOUNT = "DELETE FROM accounts WHERE tenant = $1 AND account_id = $2"
SET_RECONNECT = """
UPDATE accounts SET needs_reconnect = $3 WHERE tenant = $1 AND account_id = $2"""
SET_RECONNECT_IF_HELD = """
UPDATE accounts SET needs_reconnect = $3
WHERE tenant = $1 AND account_id = $2 AND sealed_credentials = $4"""
# COALESCE keeps the flag when none is given (NULL).
REPLACE_CREDENTIALS = """
UPDATE accounts SET sealed_credentials = $3, needs_reconnect = COALESCE($4, needs_reconnect)
WHERE tenant = $1 AND account_id = $2"""


def _record(row: Any) -> AccountRecord:
    return AccountRecord(
        account_id=row["account_id"],
        tenant=row["tenant"],
        provider=row["provider"],
        display_name=row["display_name"],
        base_url=row["base_url"],
        sealed_credentials=bytes(row["sealed_credentials"]),
        created_at=row["created_at"],
        needs_reconnect=row["needs_reconnect"],
    )


async def create_account(conn: Conn, record: AccountRecord) -> None:
    """Insert an account; AlreadyExists when the tenant already has its id."""
    try:
        await conn.execute(
            CREATE_ACCOUNT,
            clean_text(record.account_id),
            clean_text(record.tenant),
            clean_text(record.provider),
            clean_text(record.display_name),
            clean_text(record.base_url),
            record.sealed_credentials,
            utc(record.created_at),
            record.needs_reconnect,
        )
    except asyncpg.UniqueViolationError as exc:
        raise errors.AlreadyExists(
            f"account {record.account_id!r} already exists",
            reason="ACCOUNT_ALREADY_EXISTS",
            metadata={"accountId": record.account_id},
        ) from exc


async def list_accounts(conn: Conn, tenant: str) -> list[AccountRecord]:
    """The tenant's accounts, oldest first."""
    return [_record(row) for row in await conn.fetch(LIST_ACCOUNTS, tenant)]


async def all_accounts(conn: Conn, after: str, limit: int) -> list[AccountRecord]:
    """Up to `limit` of every tenant's accounts after `after`, in id order (maintenance:
    re-sealing credentials with a new key)."""
    return [_record(row) for row in await conn.fetch(ALL_ACCOUNTS, after, limit)]


async def delete_account(conn: Conn, tenant: str, account_id: str) -> bool:
    """Delete one account; False when the tenant has no such account."""
    status = await conn.execute(DELETE_ACCOUNT, tenant, account_id)
    return status != "DELETE 0"


async def set_account_reconnect(
    conn: Conn, tenant: str, account_id: str, needs: bool, sealed: bytes | None
) -> None:
    """Flag (or clear) that the account's credential was rejected (no-op when absent; with
    `sealed`, also when the account holds other credentials now)."""
    if sealed is None:
        await conn.execute(SET_RECONNECT, tenant, account_id, needs)
    else:
        await conn.execute(SET_RECONNECT_IF_HELD, tenant, account_id, needs, bytes(sealed))


async def replace_credentials(
    conn: Conn, tenant: str, account_id: str, sealed: bytes, needs: bool | None
) -> bool:
    """Store new sealed credentials (and the flag unless None); False for an unknown account."""
    status = await conn.execute(REPLACE_CREDENTIALS, tenant, account_id, sealed, needs)
    return status != "UPDATE 0"


# The row lock holds other replicas at this SELECT until the refresh commits or rolls back.
LOCK_CREDENTIALS = """
SELECT sealed_credentials FROM accounts WHERE tenant = $1 AND account_id = $2 FOR UPDATE"""
UPDATE_CREDENTIALS = """
UPDATE accounts SET sealed_credentials = $3 WHERE tenant = $1 AND account_id = $2"""


async def refresh_credentials(
    conn: Conn, tenant: str, account_id: str, refresh: Callable[[bytes], Awaitable[bytes | None]]
) -> bytes | None:
    """`refresh(stored)` under the account's row lock; stores what it returns (None: keep).

    Call inside a transaction. Returns the sealed credentials stored at the end, or None for
    an unknown account.
    """
    sealed = await conn.fetchval(LOCK_CREDENTIALS, tenant, account_id)
    if sealed is None:
        return None
    fresh = await refresh(bytes(sealed))
    if fresh is None:
        return bytes(sealed)
    await conn.execute(UPDATE_CREDENTIALS, tenant, account_id, fresh)
    return fresh
