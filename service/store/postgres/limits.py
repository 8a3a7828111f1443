"""Provider rate-limit waits shared by every replica over the database."""

from __future__ import annotations

from service.store.postgres.pool import Conn

# GREATEST keeps the later wait when two replicas record one resource.
UPSERT_RATE_LIMIT = """
INSERT INTO rate_limits (account_id, resource, until) VALUES ($1, $2, $3)
ON CONFLICT (account_id, resource) DO UPDATE
SET until = GREATEST(rate_limits.until, EXCLUDED.until)"""
PRUNE_RATE_LIMITS = "DELETE FROM rate_limits WHERE until <= $1"
ACTIVE_RATE_LIMITS = "SELECT resource, until FROM rate_limits WHERE account_id = $1 AND until > $2"


async def record(conn: Conn, account_id: str, resource: str, until: float, now: float) -> None:
    """Upsert one wait (the later `until` wins) and drop the expired ones.

    Two statements in autocommit, not one transaction: replicas pruning together then never
    hold row locks across the upsert.
    """
    await conn.execute(UPSERT_RATE_LIMIT, account_id, resource, until)
    await conn.execute(PRUNE_RATE_LIMITS, now)


async def active(conn: Conn, account_id: str, now: float) -> dict[str, float]:
    """The account's waits still running at `now`: resource -> until (unix seconds)."""
    rows = await conn.fetch(ACTIVE_RATE_LIMITS, account_id, now)
    return {row["resource"]: float(row["until"]) for row in rows}
