"""The per-account memo is bounded in count and age (issue 17 item 3).

GitLab keys it by the caller's `NativeQuery.project`: 60 distinct values used to keep 60
decoded provider answers (about 1.2 GB) for the life of the process.
"""

from __future__ import annotations

import asyncio

import pytest

from service.workspace import pool as pool_module
from service.workspace.pool import MEMO_MAX_ENTRIES, AccountPool


async def test_distinct_keys_keep_at_most_the_bound_and_the_newest() -> None:
    pool = AccountPool()
    for i in range(200):
        async with pool.memo_lock(f"project-{i}"):
            pool.memo_put(f"project-{i}", {"answer": i})
    answers, locks = pool.memo_size()
    assert answers == MEMO_MAX_ENTRIES
    assert locks <= MEMO_MAX_ENTRIES + 1  # locks of forgotten answers go too
    assert pool.memo_get("project-0") is None
    assert pool.memo_get("project-199") == {"answer": 199}


def test_recently_read_answers_survive_and_expired_ones_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    # Sync test: no event loop runs while time.monotonic is replaced.
    monkeypatch.setattr("service.workspace.pool.time.monotonic", lambda: clock[0])
    pool = AccountPool()
    pool.memo_put("repos", ["a"])
    for i in range(MEMO_MAX_ENTRIES - 1):
        pool.memo_put(f"k{i}", i)
    assert pool.memo_get("repos") == ["a"]  # read: now the most recently used
    pool.memo_put("one-more", 1)
    assert pool.memo_get("repos") == ["a"]
    assert pool.memo_get("k0") is None  # the least recently used went
    clock[0] += pool_module._MEMO_TTL_SECONDS + 1
    pool.memo_put("fresh", 2)  # every expired answer is dropped, not only on read
    assert pool.memo_size()[0] == 1


async def test_a_lock_in_use_is_kept() -> None:
    pool = AccountPool()
    held = pool.memo_lock("slow")
    await held.acquire()
    try:
        pool.memo_put("other", 1)
        assert pool.memo_lock("slow") is held
    finally:
        held.release()
    await asyncio.sleep(0)
