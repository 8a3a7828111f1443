"""Reciprocal rank fusion: pure, deterministic, versioned functions over ranked lists of keys.

A key's fused score is the sum over lists of `1 / (k + rank)` (1-based rank); a key repeated
within one list counts once, at its best (first) rank. Order: score descending, then key
ascending. Orders and thresholds compare exact rational sums (every term is `1/n` for an
integer n), so two keys whose sums are mathematically equal tie on the key whatever the float
rounding; the reported float score is the correctly rounded `math.fsum`.

`ready_keys` answers the paging question: given lists fetched only partly, which keys already
hold their final place in the fused order of the complete lists (the threshold rule)?
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

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


class Contribution(NamedTuple):
    """One list's vote for a key: its 1-based rank there and `1 / (k + rank)`.

    A named tuple (immutable, ordered by its fields like a frozen, ordered dataclass): one
    is made per vote, hundreds per search, and a tuple is made in a fraction of the time.
    """

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


def _exact(score: float) -> Fraction:
    """The exact value of a term `1 / n` (n = k + rank, an integer) from its float."""
    return Fraction(1, round(1 / score)) if score > 0 else Fraction(0)


def _exact_total(scores: Iterable[float]) -> Fraction:
    return sum((_exact(s) for s in scores), Fraction(0))


_CLOSE = 1e-12  # float sums closer than this are compared exactly (rarely: ties, near-ties)


class _Sum:
    """A float sum of terms that compares exactly when the floats are too close to tell.

    The terms themselves are needed only then (near-ties), so a sum built with `lazy` keeps
    just its float and makes its terms on demand.
    """

    __slots__ = ("_exact", "_make", "_terms", "value")

    def __init__(self, terms: Iterable[float]) -> None:
        self._terms: tuple[float, ...] | None = tuple(sorted(terms))
        self.value = total(self._terms)
        self._make: Callable[[], Iterable[float]] | None = None
        self._exact: Fraction | None = None

    @classmethod
    def of(cls, terms: Iterable[float]) -> _Sum:
        return cls(terms)

    @classmethod
    def one(cls, term: float) -> _Sum:
        """The sum of a single term (what `of([term])` gives, without sorting and fsum)."""
        made = cls.__new__(cls)
        made._terms = (term,)
        made.value = term
        made._make = None
        made._exact = None
        return made

    @classmethod
    def lazy(cls, value: float, make: Callable[[], Iterable[float]]) -> _Sum:
        """A sum whose float is `value` (within rounding of the terms' sum) and whose terms
        `make` gives when an exact comparison needs them."""
        made = cls.__new__(cls)
        made._terms = None
        made._make = make
        made.value = value
        made._exact = None
        return made

    @property
    def terms(self) -> tuple[float, ...]:
        """The terms, sorted."""
        if self._terms is None:
            assert self._make is not None
            self._terms = tuple(sorted(self._make()))
            self.value = total(self._terms)
        return self._terms

    def exact(self) -> Fraction:
        """The exact rational value (computed once)."""
        if self._exact is None:
            self._exact = _exact_total(self.terms)
        return self._exact

    def compare(self, other: _Sum) -> int:
        """-1, 0 or 1 like a <=> b."""
        if abs(self.value - other.value) > _CLOSE:
            return -1 if self.value < other.value else 1
        if self.terms == other.terms:
            return 0
        a, b = self.exact(), other.exact()
        return (a > b) - (a < b)


def _cmp(x: tuple[_Sum, str], y: tuple[_Sum, str]) -> int:
    by_score = y[0].compare(x[0])
    return by_score if by_score else (x[1] > y[1]) - (x[1] < y[1])


def _order(items: list[tuple[_Sum, str]]) -> list[tuple[_Sum, str]]:
    """Best first: sum descending, then key ascending.

    Sorted by float first; only runs of sums closer than `_CLOSE` (near-ties) whose terms
    differ are re-sorted exactly, since anything further apart already has its true order,
    and equal terms mean equal sums (ordered by key already).
    """
    ordered = sorted(items, key=lambda item: (-item[0].value, item[1]))
    start = 0
    for end in range(1, len(ordered) + 1):
        if end < len(ordered) and ordered[end - 1][0].value - ordered[end][0].value <= _CLOSE:
            continue
        if end - start > 1:
            first = ordered[start][0].terms
            if any(item[0].terms != first for item in ordered[start + 1 : end]):
                ordered[start:end] = sorted(ordered[start:end], key=functools.cmp_to_key(_cmp))
        start = end
    return ordered


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


def _ranked(
    candidates: Mapping[str, Sequence[Contribution]],
) -> list[tuple[_Sum, str, Sequence[Contribution]]]:
    sums = {
        key: _Sum.one(votes[0].score) if len(votes) == 1 else _Sum.of(c.score for c in votes)
        for key, votes in candidates.items()
    }
    ordered = _order([(value, key) for key, value in sums.items()])
    return [(value, key, candidates[key]) for value, key in ordered]


def rank(candidates: Mapping[str, Sequence[Contribution]]) -> list[Fused]:
    """Fused results, best first: score descending, then key ascending."""
    return [
        Fused(key, value.value, tuple(sorted(votes))) for value, key, votes in _ranked(candidates)
    ]


def fuse(lists: Sequence[Sequence[str]], k: int = DEFAULT_K) -> list[Fused]:
    """Fuse complete ranked lists of keys."""
    return rank(collect(lists, k))


def best_keys(candidates: Mapping[str, Sequence[Contribution]], limit: int) -> list[str]:
    """The `limit` best keys by current score (best effort when lists are incomplete)."""
    return [key for _, key, _ in _leading_ranked(candidates, max(0, limit))]


def _bound_value(
    score: float, contributions: Sequence[Contribution], open_terms: Mapping[int, float],
    open_total: float,
) -> float:
    """The float of `_bound`: the key's score plus the open terms it lacks (all open terms
    minus those of lists it has), a few operations instead of a pass over every open list."""
    if len(contributions) == 1:  # most keys were seen in one list: no sum over the lists it has
        return score + open_total - open_terms.get(contributions[0].list_index, 0.0)
    seen = {c.list_index for c in contributions}
    if len(seen) == 1:
        (only,) = seen
        return score + open_total - open_terms.get(only, 0.0)
    return score + open_total - math.fsum(open_terms[i] for i in seen if i in open_terms)


def _bound(
    value: float, contributions: Sequence[Contribution], open_terms: Mapping[int, float]
) -> _Sum:
    """Highest score a key can still reach: a vote at the next rank of every open list it lacks.

    `value` is its float (`_bound_value`); the exact terms are made only for a near-tie.
    """

    def make() -> list[float]:
        seen = {c.list_index for c in contributions}
        missing = [term for index, term in open_terms.items() if index not in seen]
        return [*(c.score for c in contributions), *missing]

    return _Sum.lazy(value, make)


def _beats(score: _Sum, key: str, rival_bound: _Sum, rival_key: str) -> bool:
    """True when a key scoring `score` surely precedes a rival that can reach `rival_bound`."""
    order = score.compare(rival_bound)
    return order > 0 or (order == 0 and key < rival_key)


def _leading(values: Sequence[float], count: int) -> list[int]:
    """Indices of the values that can be among the `count` best: those within _CLOSE of the
    `count`-th best or above (the rest are surely below all of those). A key needs only the
    best rival bound that is neither itself nor taken, and at most `count - 2` keys are
    taken, so exact order is needed among these alone."""
    if len(values) <= count:
        return list(range(len(values)))
    cutoff = heapq.nlargest(count, values)[-1] - _CLOSE
    return [index for index, value in enumerate(values) if value >= cutoff]


def _float_sum(votes: Sequence[Contribution]) -> float:
    """The float `_Sum.of` gives for a key's votes (most keys have one)."""
    return votes[0].score if len(votes) == 1 else total(sorted(c.score for c in votes))


def _leading_ranked(
    candidates: Mapping[str, Sequence[Contribution]], count: int,
    floats: Mapping[str, float] | None = None,
) -> list[tuple[_Sum, str, Sequence[Contribution]]]:
    """The first `count` items of `_ranked(candidates)` (or all, when fewer), in that order.

    Scores as floats first (`floats`, when the caller has them): only keys within `_CLOSE`
    of the `count`-th best float can be among the first `count`, so only those get a `_Sum`
    and an exact order (a search's candidates are hundreds; a page takes ten).
    """
    if count <= 0:
        return []
    keys = list(candidates)
    values = [floats[key] if floats is not None else _float_sum(candidates[key])
              for key in keys]
    ranked = _order([
        (_Sum.of(c.score for c in candidates[keys[i]]), keys[i]) for i in _leading(values, count)
    ])
    return [(value, key, candidates[key]) for value, key in ranked[:count]]


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

    Only the first `limit` keys of the order can be ready, and each needs the best bound
    among the others minus those taken before it (at most `limit - 1`): so the order is made
    for the leading `limit` keys and the bounds for the leading `limit + 2` (both by float
    first, exactly where floats are too close to tell).
    """
    if limit <= 0:
        return []
    floats = {key: _float_sum(votes) for key, votes in candidates.items()}
    unseen = _Sum.of(open_terms.values())
    if open_terms:
        ordered = _leading_ranked(candidates, limit, floats)
        # Bounds as floats first: only the leading few need a (lazy) exact sum.
        keys = list(candidates)
        values = [_bound_value(floats[key], candidates[key], open_terms, unseen.value)
                  for key in keys]
        bounds = _order([(_bound(values[i], candidates[keys[i]], open_terms), keys[i])
                         for i in _leading(values, limit + 2)])
    else:
        # Nothing open: a key's bound is its score.
        leading = _leading_ranked(candidates, limit + 2, floats)
        ordered = leading[:limit]
        bounds = [(value, key) for value, key, _ in leading]
    taken: set[str] = set()
    ready: list[str] = []
    for score, key, _ in ordered:
        if len(ready) >= limit:
            break
        if open_terms and score.compare(unseen) <= 0:
            break
        rival = next(((b, k) for b, k in bounds if k not in taken and k != key), None)
        if rival is not None and not _beats(score, key, *rival):
            break
        ready.append(key)
        taken.add(key)
    return ready
