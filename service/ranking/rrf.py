"""Reciprocal rank fusion: pure, deterministic, versioned functions over ranked lists of keys.

A key's fused score is the sum over lists of `1 / (k + rank)` (1-based rank); a key repeated
within one list counts once, at its best (first) rank. Order: score descending, then key
ascending. Sums use `math.fsum`, so equal multisets of terms give bit-identical scores no
matter the order of the lists.

`ready_keys` answers the paging question: given lists fetched only partly, which keys already
hold their final place in the fused order of the complete lists (the threshold rule)?
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_K",
    "RRF_VERSION",
    "Contribution",
    "Fused",
    "best_keys",
    "collect",
    "fuse",
    "rank",
    "ready_keys",
    "term",
    "total",
]

RRF_VERSION = "rrf/1"  # bump when scoring or tie-breaking changes (page tokens bind to it)
DEFAULT_K = 60
_EPSILON = 1e-12  # scores are ~1e-2; float error is ~1e-17, distinct rank sums differ far more


@dataclass(frozen=True, order=True)
class Contribution:
    """One list's vote for a key: its 1-based rank there and `1 / (k + rank)`."""

    list_index: int
    rank: int
    score: float


@dataclass(frozen=True)
class Fused:
    """A key with its fused score and every list's contribution (by list index)."""

    key: str
    score: float
    contributions: tuple[Contribution, ...]


def term(rank: int, k: int = DEFAULT_K) -> float:
    """`1 / (k + rank)` for a 1-based rank."""
    if rank < 1:
        raise ValueError("rank is 1-based")
    if k < 0:
        raise ValueError("k must not be negative")
    return 1.0 / (k + rank)


def total(scores: Iterable[float]) -> float:
    """Order-independent, correctly rounded sum of scores."""
    return math.fsum(scores)


def collect(lists: Sequence[Sequence[str]], k: int = DEFAULT_K) -> dict[str, list[Contribution]]:
    """Each key's contributions: one per list it appears in, at its first (best) rank there."""
    found: dict[str, list[Contribution]] = {}
    for list_index, keys in enumerate(lists):
        seen: set[str] = set()
        for position, key in enumerate(keys, start=1):
            if key in seen:
                continue
            seen.add(key)
            found.setdefault(key, []).append(Contribution(list_index, position, term(position, k)))
    return found


def rank(candidates: Mapping[str, Sequence[Contribution]]) -> list[Fused]:
    """Fused results, best first: score descending, then key ascending."""
    fused = [
        Fused(key, total(c.score for c in contributions), tuple(sorted(contributions)))
        for key, contributions in candidates.items()
    ]
    fused.sort(key=lambda item: (-item.score, item.key))
    return fused


def fuse(lists: Sequence[Sequence[str]], k: int = DEFAULT_K) -> list[Fused]:
    """Fuse complete ranked lists of keys."""
    return rank(collect(lists, k))


def best_keys(candidates: Mapping[str, Sequence[Contribution]], limit: int) -> list[str]:
    """The `limit` best keys by current score (best effort when lists are incomplete)."""
    return [item.key for item in rank(candidates)[: max(0, limit)]]


def _bound(contributions: Sequence[Contribution], open_terms: Mapping[int, float]) -> float:
    """Highest score a key can still reach: a vote at the next rank of every open list it lacks."""
    seen = {c.list_index for c in contributions}
    missing = (score for index, score in open_terms.items() if index not in seen)
    return total([*(c.score for c in contributions), *missing])


def _beats(score: float, key: str, rival_bound: float, rival_key: str) -> bool:
    """True when a key scoring `score` surely precedes a rival that can reach `rival_bound`."""
    if score > rival_bound + _EPSILON:
        return True
    return abs(score - rival_bound) <= _EPSILON and key < rival_key


def ready_keys(
    candidates: Mapping[str, Sequence[Contribution]],
    open_terms: Mapping[int, float],
    limit: int,
) -> list[str]:
    """Keys whose place in the complete fused order is already certain, best first.

    `candidates` are keys not yet emitted with their contributions from the fetched prefixes;
    `open_terms` maps each list that may hold more items to `1 / (k + fetched + 1)`, the best
    score an item it has not shown yet can get from it. A key is ready when its score beats
    the bound of every other candidate and of any unseen key. Stops at the first key that is
    not ready, so the answer is always a prefix of the true order.
    """
    ordered = rank(candidates)
    unseen = total(open_terms.values())
    bounds = sorted(
        ((_bound(contributions, open_terms), key) for key, contributions in candidates.items()),
        key=lambda pair: (-pair[0], pair[1]),
    )
    taken: set[str] = set()
    ready: list[str] = []
    for item in ordered:
        if len(ready) >= limit:
            break
        if open_terms and not item.score > unseen + _EPSILON:
            break
        rival = next(((b, k) for b, k in bounds if k not in taken and k != item.key), None)
        if rival is not None and not _beats(item.score, item.key, *rival):
            break
        ready.append(item.key)
        taken.add(item.key)
    return ready
