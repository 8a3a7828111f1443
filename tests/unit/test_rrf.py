"""Property tests of reciprocal rank fusion (service.ranking.rrf)."""

from __future__ import annotations

import copy
import itertools
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from service.ranking import rrf

KEYS = st.sampled_from([f"k{i:02d}" for i in range(30)])
LISTS = st.lists(st.lists(KEYS, max_size=25), max_size=6)


def _pairs(fused: list[rrf.Fused]) -> list[tuple[str, float]]:
    return [(item.key, item.score) for item in fused]


def test_two_queries_returning_a_document_rank_it_first() -> None:
    fused = rrf.fuse([["m1", "m2"], ["m3", "m2"]])
    assert [item.key for item in fused] == ["m2", "m1", "m3"]
    assert fused[0].score == rrf.total([1 / 62, 1 / 62])
    assert [(c.list_index, c.rank) for c in fused[0].contributions] == [(0, 2), (1, 2)]


def test_repeat_within_one_list_scores_once_at_best_rank() -> None:
    fused = {item.key: item for item in rrf.fuse([["a", "b", "a", "a"]])}
    assert fused["a"].score == 1 / 61
    assert fused["a"].contributions == (rrf.Contribution(0, 1, 1 / 61),)
    assert fused["b"].contributions[0].rank == 2  # ranks are positions in the list


def test_k_is_configurable() -> None:
    assert rrf.fuse([["a"]], k=0)[0].score == 1.0
    assert rrf.term(3, k=10) == 1 / 13


@given(st.data())
def test_order_of_lists_does_not_matter(data: st.DataObject) -> None:
    lists = data.draw(LISTS)
    shuffled = data.draw(st.permutations(lists))
    assert _pairs(rrf.fuse(shuffled)) == _pairs(rrf.fuse(lists))


@given(LISTS)
def test_each_key_votes_once_per_list_at_its_first_position(lists: list[list[str]]) -> None:
    for item in rrf.fuse(lists):
        indexes = [c.list_index for c in item.contributions]
        assert len(indexes) == len(set(indexes))
        for contribution in item.contributions:
            assert lists[contribution.list_index].index(item.key) + 1 == contribution.rank
            assert contribution.score == rrf.term(contribution.rank)
        assert item.score == rrf.total(c.score for c in item.contributions)


@given(LISTS)
def test_ties_break_by_key_and_order_is_total(lists: list[list[str]]) -> None:
    fused = rrf.fuse(lists)
    for before, after in itertools.pairwise(fused):
        assert before.score > after.score or (
            before.score == after.score and before.key < after.key
        )
    assert rrf.fuse(lists) == fused  # deterministic


@given(LISTS)
def test_equal_rank_multisets_give_identical_scores(lists: list[list[str]]) -> None:
    fused = rrf.fuse(lists)
    by_ranks: dict[tuple[int, ...], float] = {}
    for item in fused:
        ranks = tuple(sorted(c.rank for c in item.contributions))
        assert by_ranks.setdefault(ranks, item.score) == item.score


@given(LISTS)
def test_inputs_are_never_mutated(lists: list[list[str]]) -> None:
    before = copy.deepcopy(lists)
    candidates = rrf.collect(lists)
    snapshot = copy.deepcopy(candidates)
    rrf.rank(candidates)
    rrf.best_keys(candidates, 5)
    rrf.ready_keys(candidates, {0: 0.01}, 5)
    assert lists == before
    assert candidates == snapshot


def _page_through(lists: list[list[str]], page: int, k: int) -> list[str]:
    """Emit keys with the threshold rule, fetching `page` more items of a list when blocked."""
    fetched = [0] * len(lists)
    emitted: list[str] = []
    while True:
        prefixes = [keys[:n] for keys, n in zip(lists, fetched, strict=True)]
        candidates = {
            key: votes for key, votes in rrf.collect(prefixes, k).items() if key not in emitted
        }
        open_terms = {
            i: rrf.term(n + 1, k) for i, n in enumerate(fetched) if n < len(lists[i])
        }
        ready = rrf.ready_keys(candidates, open_terms, 3)
        emitted.extend(ready)
        if ready:
            continue
        if not open_terms:
            assert not candidates
            return emitted
        widest = max(open_terms.values())
        for i, value in open_terms.items():
            if value == widest:
                fetched[i] += page


@settings(max_examples=200)
@given(LISTS, st.integers(1, 7), st.sampled_from([0, 1, 60]))
def test_threshold_paging_equals_fusing_complete_lists(
    lists: list[list[str]], page: int, k: int
) -> None:
    expected = [item.key for item in rrf.fuse(lists, k)]
    assert _page_through(lists, page, k) == expected


def test_ready_keys_waits_while_an_unseen_key_could_still_win() -> None:
    candidates = rrf.collect([["a"], ["b"]])
    # Both lists may hold more: an unseen key in both could score 2/62 > 1/61.
    assert rrf.ready_keys(candidates, {0: rrf.term(2), 1: rrf.term(2)}, 5) == []
    assert rrf.ready_keys(candidates, {}, 5) == ["a", "b"]


def test_ready_keys_respects_limit() -> None:
    candidates = rrf.collect([["a", "b", "c"]])
    assert rrf.ready_keys(candidates, {}, 2) == ["a", "b"]
    assert rrf.best_keys(candidates, 0) == []


def test_equal_sums_of_different_terms_tie_on_the_key() -> None:
    # k = 0: x scores 1/2 + 1/6, y scores 1/3 + 1/3; equal sums of different terms, so the
    # near-tie is settled exactly, then by key.
    lists = [["p", "x"], ["q1", "q2", "q3", "q4", "q5", "x"], ["r1", "r2", "y"], ["s1", "s2", "y"]]
    keys = [item.key for item in rrf.fuse(lists, 0)]
    assert keys.index("x") + 1 == keys.index("y")
    flipped = [[key.replace("x", "z") for key in keys_] for keys_ in lists]  # z sorts after y
    keys = [item.key for item in rrf.fuse(flipped, 0)]
    assert keys.index("y") + 1 == keys.index("z")


def _ready_keys_over_every_candidate(
    candidates: dict[str, list[rrf.Contribution]], open_terms: dict[int, float], limit: int,
    k: int,
) -> list[str]:
    """The threshold rule written out over the whole fused order, in exact fractions: a key
    is ready when it beats the bound of every other candidate not taken before it and of
    any unseen key (the definition ready_keys computes over the leading keys only)."""
    open_exact = {i: Fraction(1, round(1 / t)) for i, t in open_terms.items()}

    def score(key: str) -> Fraction:
        return sum((Fraction(1, k + c.rank) for c in candidates[key]), Fraction(0))

    def bound(key: str) -> Fraction:
        has = {c.list_index for c in candidates[key]}
        return score(key) + sum((t for i, t in open_exact.items() if i not in has), Fraction(0))

    order = sorted(candidates, key=lambda key: (-score(key), key))
    unseen = sum(open_exact.values(), Fraction(0))
    ready: list[str] = []
    for key in order[:limit]:
        if open_terms and score(key) <= unseen:
            break
        rivals = [other for other in order if other != key and other not in ready]
        if any(bound(r) > score(key) or (bound(r) == score(key) and r < key) for r in rivals):
            break
        ready.append(key)
    return ready


@settings(max_examples=300)
@given(LISTS, st.lists(st.integers(0, 5), max_size=6), st.integers(0, 8),
       st.sampled_from([0, 1, 60]))
def test_ready_keys_is_the_rule_over_every_candidate(
    lists: list[list[str]], prefix: list[int], limit: int, k: int
) -> None:
    """Computed over the leading keys only, the answer is the rule's over all of them; and
    best_keys is the head of the fused order."""
    wanted = (prefix + [0] * len(lists))[: len(lists)]
    fetched = [min(len(keys), n) for keys, n in zip(lists, wanted, strict=True)]
    prefixes = [keys[:n] for keys, n in zip(lists, fetched, strict=True)]
    candidates = rrf.collect(prefixes, k)
    open_terms = {i: rrf.term(n + 1, k) for i, n in enumerate(fetched) if n < len(lists[i])}
    assert rrf.ready_keys(candidates, open_terms, limit) == _ready_keys_over_every_candidate(
        candidates, open_terms, limit, k)
    assert rrf.best_keys(candidates, limit) == [f.key for f in rrf.rank(candidates)[:limit]]
