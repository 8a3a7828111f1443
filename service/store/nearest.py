"""The k nearest rows of an in-process matrix, ties with the k-th kept (both stores' caches)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

TIES_MAX = 4096  # candidates at most, ties with the k-th included (vec0's limit on k)


def nearest_positions(
    distances: NDArray[np.float32], tiebreak: NDArray[np.int64], k: int
) -> NDArray[np.intp]:
    """Positions of the k smallest distances and of every one tied with the k-th (the page
    breaks ties by document identity, which only the statement knows), nearest first, equal
    distances by `tiebreak`; at most TIES_MAX in all."""
    if k <= 0 or not len(distances):
        return np.empty(0, dtype=np.intp)
    if len(distances) > k:
        kth = distances[np.argpartition(distances, k - 1)[k - 1]]
        keep = np.flatnonzero(distances <= kth)
        if len(keep) > TIES_MAX:
            keep = keep[np.argpartition(distances[keep], TIES_MAX - 1)[:TIES_MAX]]
    else:
        keep = np.arange(len(distances))
    return keep[np.lexsort((tiebreak[keep], distances[keep]))]
