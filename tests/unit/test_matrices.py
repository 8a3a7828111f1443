"""The vector caches' shared arithmetic (service.store.matrices): distances and nearest rows."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from service.store.matrices import QuietRefresh, cosine_distances, nearest_positions, normalised


def _rows(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return normalised(rng.standard_normal((count, 384), dtype=np.float32))


def test_distances_are_one_minus_the_dot_product_of_every_row_in_order() -> None:
    first, second = _rows(300, 1), _rows(200, 2)
    probe = _rows(1, 3)[0]
    got = cosine_distances([first, second], probe)
    expected = 1.0 - np.concatenate([first, second]).astype(np.float64) @ probe
    assert got.dtype == np.float32
    assert got.shape == (500,)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_nearest_rows_of_the_distances_are_the_exact_nearest() -> None:
    rows = _rows(5000, 4)
    probe = rows[1234] * 0.7 + rows[4321] * 0.3
    probe /= np.linalg.norm(probe)
    distances = cosine_distances([rows[:2500], rows[2500:]], probe)
    picked = nearest_positions(distances, np.arange(len(rows), dtype=np.int64), 10)
    exact = np.argsort(1.0 - rows.astype(np.float64) @ probe, kind="stable")[:10]
    assert list(picked[:2]) == [1234, 4321]
    assert set(picked) == set(exact)


@pytest.mark.parametrize("seed", range(30))
def test_the_nearest_are_the_first_k_by_distance_then_tiebreak(seed: int) -> None:
    """Exactly k rows, the first k of the whole (distance, tiebreak) order, so that a larger
    k only appends: many exact ties (the synthetic corpus has equal texts), NaN rows last."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(1, 400))
    distances = rng.choice(rng.random(int(rng.integers(1, 20))), count).astype(np.float32)
    distances[rng.random(count) < 0.05] = np.nan
    tiebreak = rng.permutation(count).astype(np.int64)
    whole = np.lexsort((tiebreak, distances))
    previous: list[int] = []
    for k in sorted(rng.integers(1, count + 5, 6).tolist()):
        picked = nearest_positions(distances, tiebreak, k).tolist()
        assert picked == whole[:k].tolist(), k
        assert picked[: len(previous)] == previous
        previous = picked


def test_no_matrices_give_no_distances() -> None:
    assert cosine_distances([np.empty((0, 4), dtype=np.float32)], np.ones(4, np.float32)).size == 0


async def test_a_refresh_runs_once_after_a_burst_has_been_quiet() -> None:
    runs: list[float] = []
    loop = asyncio.get_running_loop()

    async def refresh() -> None:
        runs.append(loop.time())

    quiet = QuietRefresh(refresh, 0.2)
    last_notice = 0.0
    for _ in range(5):
        last_notice = loop.time()  # at most the time the notice records
        quiet.notice()
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    assert len(runs) == 1
    assert runs[0] >= last_notice + 0.2
    await quiet.aclose()


async def test_writes_during_a_refresh_bring_another_after_it() -> None:
    gate = asyncio.Event()
    runs = 0

    async def refresh() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            await gate.wait()

    quiet = QuietRefresh(refresh, 0.05)
    quiet.notice()
    await asyncio.sleep(0.15)
    assert runs == 1  # running, held at the gate
    quiet.notice()  # a write while it runs
    gate.set()
    await asyncio.sleep(0.3)
    assert runs == 2
    await quiet.aclose()


async def test_off_never_refreshes_and_close_cancels_a_pending_one() -> None:
    runs = 0

    async def refresh() -> None:
        nonlocal runs
        runs += 1

    off = QuietRefresh(refresh, 0.0)
    off.notice()
    pending = QuietRefresh(refresh, 0.2)
    pending.notice()
    await pending.aclose()
    await asyncio.sleep(0.3)
    assert runs == 0


async def test_a_failing_refresh_is_logged_and_the_next_write_tries_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = 0

    async def refresh() -> None:
        nonlocal runs
        runs += 1
        raise RuntimeError("database went away")

    quiet = QuietRefresh(refresh, 0.02)
    quiet.notice()
    await asyncio.sleep(0.1)
    quiet.notice()
    await asyncio.sleep(0.1)
    assert runs == 2
    assert "vector cache refresh failed" in caplog.text
    await quiet.aclose()
