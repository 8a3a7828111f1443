"""Provider rate-limit waits shared by every replica over the database."""

from __future__ import annotations

from collections.abc import Sequence

from service.store.postgres.pool import Conn

# GREATEST keeps the later wait when two replicas record one resource.
UPSERT_RATE_LIMIT = """
INSERT INTO rate_limits (account_id, resource, until) VALUES ($1, $2, $3)
ON CONFLICT (account_id, resource) DO UPDATE
SET until = GREATEST(rate_limits.until, EXCLUDED.until)"""
PRUNE_RATE_LIMITS = "DELETE FROM rate_limits WHERE until <= $1"
ACTIVE_RATE_LIMITS = """
SELECT account_id, resource, until FROM rate_limits
WHERE account_id = ANY($1::text[]) AND until > $2"""


async def record(conn: Conn, account_id: str, resource: str, until: float, now: float) -> None:
    """Upsert one wait (the later `until` wins) and drop the expired ones.

    Two statements in autocommit, not one transaction: replicas pruning together then never
    hold row locks across the upsert.
    """
    await conn.execute(UPSERT_RATE_LIMIT, account_id, resource, until)
    await conn.execute(PRUNE_RATE_LIMITS, now)


async def active(
    conn: Conn, account_ids: Sequence[str], now: float
) -> dict[str, dict[str, float]]:
    """The accounts' waits still running at `now`: account -> resource -> until (unix
    seconds); accounts without one are absent."""
    found: dict[str, dict[str, float]] = {}
    for row in await conn.fetch(ACTIVE_RATE_LIMITS, list(account_ids), now):
        found.setdefault(row["account_id"], {})[row["resource"]] = float(row["until"])
    return found
