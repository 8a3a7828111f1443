"""Provider accounts: stored sealed, never decrypted here."""

from __future__ import annotations

from typing import Any

import apsw

from service import errors
from service.store.base import AccountRecord
from service.store.sqlite.values import from_micros, immediate, to_micros

INSERT_ACCOUNT = """
INSERT INTO accounts (
    account_id, tenant, provider, display_name, base_url, sealed_credentials, created_at,
    needs_reconnect
) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
LIST_ACCOUNTS = """
SELECT account_id, tenant, provider, display_name, base_url, sealed_credentials, created_at,
       needs_reconnect
FROM accounts WHERE tenant = ? ORDER BY created_at, account_id
"""
ALL_ACCOUNTS = """
SELECT account_id, tenant, provider, display_name, base_url, sealed_credentials, created_at,
       needs_reconnect
FROM accounts WHERE account_id > ? ORDER BY account_id LIMIT ?
"""
DELETE_ACCOUNT = "DELETE FROM accounts WHERE tenant = ? AND account_id = ?"
SET_RECONNECT = "UPDATE accounts SET needs_reconnect = ? WHERE tenant = ? AND account_id = ?"
SET_RECONNECT_IF_HELD = SET_RECONNECT + " AND sealed_credentials = ?"
# COALESCE keeps the flag when none is given (NULL).
REPLACE_CREDENTIALS = """
UPDATE accounts SET sealed_credentials = ?, needs_reconnect = COALESCE(?, needs_reconnect)
WHERE tenant = ? AND account_id = ?
"""


def create_account(conn: apsw.Connection, record: AccountRecord) -> None:
    """Insert an account; AlreadyExists when the id is taken."""
    values = (
        record.account_id,
        record.tenant,
        record.provider,
        record.display_name,
        record.base_url,
        bytes(record.sealed_credentials),
        to_micros(record.created_at),
        int(record.needs_reconnect),
    )
    try:
        with immediate(conn):
            conn.execute(INSERT_ACCOUNT, values)
    except apsw.ConstraintError as exc:
        raise errors.AlreadyExists(
            f"account {record.account_id!r} already exists", reason="ACCOUNT_ALREADY_EXISTS"
        ) from exc


def _record(row: Any) -> AccountRecord:
    return AccountRecord(
        account_id=row[0],
        tenant=row[1],
        provider=row[2],
        display_name=row[3],
        base_url=row[4],
        sealed_credentials=bytes(row[5]),
        created_at=from_micros(row[6]),
        needs_reconnect=bool(row[7]),
    )


def list_accounts(conn: apsw.Connection, tenant: str) -> list[AccountRecord]:
    """Accounts of `tenant`, oldest first."""
    return [_record(row) for row in conn.execute(LIST_ACCOUNTS, (tenant,))]


def all_accounts(conn: apsw.Connection, after: str, limit: int) -> list[AccountRecord]:
    """Up to `limit` of every tenant's accounts after `after`, in id order (maintenance)."""
    return [_record(row) for row in conn.execute(ALL_ACCOUNTS, (after, limit))]


def delete_account(conn: apsw.Connection, tenant: str, account_id: str) -> bool:
    """Delete an account of `tenant`; False when there is none."""
    with immediate(conn):
        conn.execute(DELETE_ACCOUNT, (tenant, account_id))
        return conn.changes() > 0


def set_reconnect(
    conn: apsw.Connection, tenant: str, account_id: str, needs: bool, sealed: bytes | None
) -> None:
    """Flag or clear `needs_reconnect` (no-op for an unknown account; with `sealed`, also for
    an account that holds other credentials now)."""
    with immediate(conn):
        if sealed is None:
            conn.execute(SET_RECONNECT, (int(needs), tenant, account_id))
        else:
            conn.execute(SET_RECONNECT_IF_HELD, (int(needs), tenant, account_id, bytes(sealed)))


def replace_credentials(
    conn: apsw.Connection, tenant: str, account_id: str, sealed: bytes, needs: bool | None
) -> bool:
    """Store new sealed credentials (and the flag unless None); False for an unknown account."""
    flag = None if needs is None else int(needs)
    with immediate(conn):
        conn.execute(REPLACE_CREDENTIALS, (bytes(sealed), flag, tenant, account_id))
        return conn.changes() > 0


READ_CREDENTIALS = "SELECT sealed_credentials FROM accounts WHERE tenant = ? AND account_id = ?"
# Only over the blob the refresh started from: credentials replaced meanwhile (by a user) win.
SWAP_CREDENTIALS = """
UPDATE accounts SET sealed_credentials = ?
WHERE tenant = ? AND account_id = ? AND sealed_credentials = ?
"""


def read_credentials(conn: apsw.Connection, tenant: str, account_id: str) -> bytes | None:
    """The account's sealed credentials; None for an unknown account."""
    for row in conn.execute(READ_CREDENTIALS, (tenant, account_id)):
        return bytes(row[0])
    return None


def swap_credentials(
    conn: apsw.Connection, tenant: str, account_id: str, old: bytes, new: bytes
) -> bytes | None:
    """Replace `old` by `new`; returns the sealed credentials stored afterwards."""
    with immediate(conn):
        conn.execute(SWAP_CREDENTIALS, (bytes(new), tenant, account_id, bytes(old)))
        return read_credentials(conn, tenant, account_id)
