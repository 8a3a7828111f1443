"""Provider rate-limit waits shared by every process over the database file."""

from __future__ import annotations

import json
from collections.abc import Sequence

import apsw

from service.store.sqlite.values import immediate

# MAX keeps the later wait when two processes record one resource.
UPSERT_RATE_LIMIT = """
INSERT INTO rate_limits (account_id, resource, until) VALUES (?, ?, ?)
ON CONFLICT (account_id, resource) DO UPDATE SET until = MAX(until, excluded.until)
"""
PRUNE_RATE_LIMITS = "DELETE FROM rate_limits WHERE until <= ?"
ACTIVE_RATE_LIMITS = """
SELECT account_id, resource, until FROM rate_limits
WHERE account_id IN (SELECT value FROM json_each(?)) AND until > ?"""


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)


def record(conn: apsw.Connection, account_id: str, resource: str, until: float, now: float) -> None:
    """Upsert one wait (the later `until` wins) and drop the expired ones."""
    with immediate(conn):
        conn.execute(PRUNE_RATE_LIMITS, (_micros(now),))
        conn.execute(UPSERT_RATE_LIMIT, (account_id, resource, _micros(until)))


def active(
    conn: apsw.Connection, account_ids: Sequence[str], now: float
) -> dict[str, dict[str, float]]:
    """The accounts' waits still running at `now`: account -> resource -> until (unix
    seconds); accounts without one are absent."""
    found: dict[str, dict[str, float]] = {}
    for account_id, resource, until in conn.execute(
        ACTIVE_RATE_LIMITS, (json.dumps(list(account_ids)), _micros(now))
    ):
        found.setdefault(account_id, {})[resource] = until / 1_000_000
    return found
