"""The vector caches' shared arithmetic (service.store.matrices): distances and nearest rows."""

from __future__ import annotations

import numpy as np

from service.store.matrices import cosine_distances, nearest_positions, normalised


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


def test_no_matrices_give_no_distances() -> None:
    assert cosine_distances([np.empty((0, 4), dtype=np.float32)], np.ones(4, np.float32)).size == 0
