"""Provider rate-limit waits in the store: the later wait wins, expired ones are ignored."""

from __future__ import annotations

import asyncio

from service.store.base import Store

NOW = 1_800_000_000.0


async def _waits(store: Store, account_id: str, now: float) -> dict[str, float]:
    return (await store.rate_limits([account_id], now=now)).get(account_id, {})


async def test_waits_round_trip_per_account_and_resource(store: Store) -> None:
    assert await _waits(store, "a1", NOW) == {}
    await store.record_rate_limit("a1", "search", NOW + 30, now=NOW)
    await store.record_rate_limit("a1", "code_search", NOW + 5, now=NOW)
    await store.record_rate_limit("b1", "search", NOW + 60, now=NOW)

    assert await _waits(store, "a1", NOW) == {"search": NOW + 30, "code_search": NOW + 5}
    assert await _waits(store, "b1", NOW) == {"search": NOW + 60}


async def test_the_later_wait_wins(store: Store) -> None:
    await store.record_rate_limit("a1", "search", NOW + 30, now=NOW)
    await store.record_rate_limit("a1", "search", NOW + 10, now=NOW)  # an earlier end: kept 30
    assert await _waits(store, "a1", NOW) == {"search": NOW + 30}
    await store.record_rate_limit("a1", "search", NOW + 45.5, now=NOW)
    assert await _waits(store, "a1", NOW) == {"search": NOW + 45.5}


async def test_expired_waits_are_ignored_and_pruned(store: Store) -> None:
    await store.record_rate_limit("a1", "search", NOW + 5, now=NOW)
    await store.record_rate_limit("a1", "api/x", NOW + 50, now=NOW)
    assert await _waits(store, "a1", NOW + 5) == {"api/x": NOW + 50}
    # A later write prunes the expired row; recording it again starts from nothing.
    await store.record_rate_limit("b1", "search", NOW + 20, now=NOW + 10)
    await store.record_rate_limit("a1", "search", NOW + 12, now=NOW + 10)
    assert await _waits(store, "a1", NOW + 10) == {"search": NOW + 12, "api/x": NOW + 50}


async def test_concurrent_writers_keep_the_latest_wait(store: Store) -> None:
    ends = [NOW + seconds for seconds in range(1, 21)]
    await asyncio.gather(*(store.record_rate_limit("a1", "search", end, now=NOW) for end in ends))
    assert await _waits(store, "a1", NOW) == {"search": max(ends)}


async def test_one_read_returns_the_waits_of_every_account_asked(store: Store) -> None:
    await store.record_rate_limit("a1", "search", NOW + 30, now=NOW)
    await store.record_rate_limit("b1", "search", NOW + 60, now=NOW)
    await store.record_rate_limit("c1", "search", NOW + 90, now=NOW)
    assert await store.rate_limits(["a1", "b1", "z9"], now=NOW) == {
        "a1": {"search": NOW + 30}, "b1": {"search": NOW + 60}}
    assert await store.rate_limits([], now=NOW) == {}
