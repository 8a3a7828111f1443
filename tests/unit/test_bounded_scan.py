"""The bounded int8 first pass (service.store.bounded_scan) answers exactly what the full
float32 scan answers, position for position, on data built to make that hard."""

from __future__ import annotations

import itertools
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from service.store import bounded_scan
from service.store.bounded_scan import ScanRows, encode, nearest
from service.store.matrices import cosine_distances, nearest_positions, normalised


def _normalised(rows: NDArray[np.float64]) -> NDArray[np.float32]:
    return normalised(np.ascontiguousarray(rows, dtype=np.float32))


def _clustered(rng: np.random.Generator, count: int, dims: int = 384) -> NDArray[np.float32]:
    """Rows around a few centres (near ties), some exact duplicates, a few zero rows and a
    few with one dominant coordinate (coarse codes)."""
    centres = rng.standard_normal((8, dims))
    rows = centres[rng.integers(0, 8, count)] + rng.uniform(0.05, 0.6) * rng.standard_normal(
        (count, dims)
    )
    dupes = rng.integers(0, count, count // 20)
    rows[dupes] = rows[rng.integers(0, count)]
    rows[rng.integers(0, count, 3)] = 0.0
    spiky = rng.integers(0, count, count // 50)
    rows[spiky, rng.integers(0, dims, len(spiky))] += 40.0
    return _normalised(rows)


def _split(
    rows: NDArray[np.float32], parts: int, rng: np.random.Generator
) -> list[NDArray[np.float32]]:
    cuts = sorted(rng.choice(np.arange(1, len(rows)), size=parts - 1, replace=False).tolist())
    return [np.ascontiguousarray(p) for p in np.split(rows, cuts)]


def _parts(tiebreak: NDArray[np.int64], held: list[ScanRows]) -> list[NDArray[np.int64]]:
    """`tiebreak` cut as `nearest` takes it: one part per matrix."""
    cuts = np.cumsum([len(m) for m in held])[:-1]
    return list(np.split(tiebreak, cuts))


def _full(matrices: list[NDArray[np.float32]], probe: NDArray[np.float32],
          tiebreak: NDArray[np.int64], k: int) -> NDArray[np.intp]:
    return nearest_positions(cosine_distances(matrices, probe), tiebreak, k)


@pytest.mark.parametrize("seed", range(40))
def test_the_bounded_pass_picks_exactly_what_the_full_scan_picks(seed: int) -> None:
    rng = np.random.default_rng(seed)
    count = int(rng.integers(5_000, 30_000))
    rows = _clustered(rng, count)
    matrices = _split(rows, int(rng.integers(1, 6)), rng)
    held = [ScanRows.of(m) for m in matrices]
    tiebreak = rng.permutation(count).astype(np.int64)
    for _ in range(5):
        kind = rng.integers(0, 3)
        if kind == 0:  # a row of the scope itself (a duplicate's ties included)
            probe = rows[int(rng.integers(0, count))].copy()
        elif kind == 1:  # near a centre of the data
            probe = _normalised(rows[rng.integers(0, count, 3)].sum(axis=0)[None, :])[0]
        else:  # anywhere
            probe = _normalised(rng.standard_normal((1, 384)))[0]
        k = int(rng.choice([1, 10, 33, 110, 300]))
        expected = _full(matrices, probe, tiebreak, k)
        np.testing.assert_array_equal(nearest(held, probe, _parts(tiebreak, held), k), expected)


@pytest.mark.parametrize("helper", ["free", "busy"])
@pytest.mark.parametrize("seed", range(8))
def test_a_first_pass_shared_with_the_helper_thread_picks_the_same_rows(
    seed: int, helper: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past SPLIT_ROWS the first pass is cut in pieces of PIECE_ROWS (a matrix longer than
    that in several) that the caller and, when it is free, the helper thread take in turn;
    with the helper busy (another search's pieces) the caller takes them all. Lowered here
    so that small scopes take that path."""
    monkeypatch.setattr(bounded_scan, "SPLIT_ROWS", 4096)
    monkeypatch.setattr(bounded_scan, "PIECE_ROWS", 1024)
    rng = np.random.default_rng(100 + seed)
    count = int(rng.integers(5_000, 30_000))
    rows = _clustered(rng, count)
    matrices = _split(rows, int(rng.integers(1, 6)), rng)
    held = [ScanRows.of(m) for m in matrices]
    tiebreak = rng.permutation(count).astype(np.int64)
    probes = [rows[int(rng.integers(0, count))].copy(),
              _normalised(rng.standard_normal((1, 384)))[0]]
    threads: set[str] = set()
    first_pass = bounded_scan._first_pass
    _until_free(bounded_scan._HELPER)  # another test's helper may still be finishing
    waits = helper == "free" and bounded_scan._HELPER.enabled
    helped = threading.Event()

    def recording(*args: Any) -> None:
        name = threading.current_thread().name
        threads.add(name)
        if name.startswith("bounded-scan"):
            helped.set()
        elif waits:
            helped.wait(10)  # the first search's first piece waits for the helper's first
        first_pass(*args)

    monkeypatch.setattr(bounded_scan, "_first_pass", recording)
    busy = bounded_scan._HELPER._free
    if helper == "busy":
        busy.acquire()
    try:
        for probe in probes:
            for k in (1, 10, 110):
                np.testing.assert_array_equal(nearest(held, probe, _parts(tiebreak, held), k),
                                              _full(matrices, probe, tiebreak, k))
    finally:
        if helper == "busy":
            busy.release()
    _until_free(bounded_scan._HELPER)  # the helper is free again after every search
    assert helped.is_set() == waits


def test_concurrent_searches_share_one_helper_and_each_get_the_full_scans_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Searches on several threads at once (the stores run each on a worker thread): one at
    a time gets the helper, the others take all their pieces; none waits for another, and
    every answer is the full scan's."""
    monkeypatch.setattr(bounded_scan, "SPLIT_ROWS", 4096)
    monkeypatch.setattr(bounded_scan, "PIECE_ROWS", 1024)
    rng = np.random.default_rng(11)
    count = 20_000
    rows = _clustered(rng, count)
    matrices = _split(rows, 4, rng)
    held = [ScanRows.of(m) for m in matrices]
    tiebreak = rng.permutation(count).astype(np.int64)
    probes = [rows[int(i)].copy() for i in rng.integers(0, count, 6)]
    expected = [_full(matrices, probe, tiebreak, 10) for probe in probes]
    failures: list[BaseException] = []

    def searcher(offset: int) -> None:
        try:
            for turn in range(30):
                at = (offset + turn) % len(probes)
                got = nearest(held, probes[at], _parts(tiebreak, held), 10)
                np.testing.assert_array_equal(got, expected[at])
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=searcher, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert not failures, failures[0]
    _until_free(bounded_scan._HELPER)


def _until_free(helper: Any) -> None:
    for _ in range(500):
        if not helper._free.locked():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the helper thread kept its turn")


def test_the_pieces_cover_every_row_once() -> None:
    rng = np.random.default_rng(2)
    held = [ScanRows.of(m) for m in _split(_clustered(rng, 9_000, dims=8), 4, rng)]
    pieces = bounded_scan._pieces(held)
    for size in (1, 7, 1_000, 2_999, 9_000, 20_000):
        cut = bounded_scan._cut(pieces, size)
        covered = [(start, start + hi - lo) for _, lo, hi, start in cut]
        assert sum(end - start for start, end in covered) == 9_000
        assert covered[0][0] == 0
        assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))
        assert all(0 < end - start <= size for start, end in covered)
        for codes, lo, hi, start in cut:
            assert 0 <= lo < hi <= len(codes.codes)
            # each piece's rows land where the concatenation has them
            matrix = next(i for i, m in enumerate(held) if m.codes is codes)
            assert start - lo == sum(len(m) for m in held[:matrix])


def _helper() -> Any:
    helper = bounded_scan._Helper()
    helper.enabled = True  # even on one CPU: the turns are what is tested
    return helper


def test_share_does_every_item_once_on_both_threads() -> None:
    helper = _helper()
    started = {True: threading.Event(), False: threading.Event()}  # by "on the helper"
    done: list[tuple[int, str]] = []

    def work(item: int) -> None:
        name = threading.current_thread().name
        mine = name.startswith("bounded-scan")
        # Each thread's first item waits until the other thread holds one.
        if not started[mine].is_set():
            started[mine].set()
            assert started[not mine].wait(10)
        done.append((item, name))

    helper.share(list(range(40)), work)
    assert sorted(item for item, _ in done) == list(range(40))
    assert {name.startswith("bounded-scan") for _, name in done} == {True, False}
    _until_free(helper)


def test_share_never_waits_for_a_helper_that_has_not_started() -> None:
    """The helper's thread is held up (its core busy elsewhere): the caller takes every
    item and returns; the helper, when it starts, finds nothing left and frees its turn."""
    helper = _helper()
    held_up = threading.Event()
    helper._pool = ThreadPoolExecutor(1, thread_name_prefix="bounded-scan")
    helper._pool.submit(held_up.wait)
    done: list[tuple[int, str]] = []
    try:
        helper.share(list(range(12)), lambda i: done.append((i, threading.current_thread().name)))
        assert [item for item, _ in done] == list(range(12))
        assert {name for _, name in done} == {threading.current_thread().name}
        assert helper._free.locked()  # its turn is queued behind the hold-up
    finally:
        held_up.set()
    _until_free(helper)
    assert len(done) == 12
    helper._pool.shutdown()


def test_a_helper_that_cannot_take_work_leaves_every_item_to_the_caller() -> None:
    """At interpreter shutdown the pool refuses new work: the search does every piece."""
    helper = _helper()
    helper._pool = ThreadPoolExecutor(1, thread_name_prefix="bounded-scan")
    helper._pool.shutdown()
    done: list[int] = []
    helper.share(list(range(5)), done.append)
    assert done == list(range(5))
    assert not helper._free.locked()


def test_an_error_on_the_helper_thread_is_raised_to_the_caller() -> None:
    helper = _helper()
    failed = threading.Event()

    def work(item: int) -> None:
        if threading.current_thread().name.startswith("bounded-scan"):
            failed.set()
            raise ValueError("a piece failed")
        assert failed.wait(10)

    with pytest.raises(ValueError, match="a piece failed"):
        helper.share(list(range(8)), work)
    _until_free(helper)


def test_no_tiebreak_is_the_positions_and_take_reads_the_parts() -> None:
    rng = np.random.default_rng(4)
    rows = _clustered(rng, 12_000)
    held = [ScanRows.of(m) for m in _split(rows, 3, rng)]
    positions = np.arange(len(rows), dtype=np.int64)
    for probe in (rows[17], _normalised(rng.standard_normal((1, 384)))[0]):
        np.testing.assert_array_equal(nearest(held, probe, None, 40),
                                      nearest(held, probe, _parts(positions, held), 40))
    ids = rng.permutation(len(rows)).astype(np.int64)
    chosen = rng.integers(0, len(rows), 500)
    np.testing.assert_array_equal(bounded_scan.take(_parts(ids, held), chosen), ids[chosen])
    assert len(bounded_scan.take([], np.empty(0, dtype=np.intp))) == 0


def test_every_row_lies_within_its_bound() -> None:
    rng = np.random.default_rng(7)
    rows = _clustered(rng, 3000)
    codes = encode(rows)
    for probe in _clustered(rng, 20):
        probe_codes = encode(probe[None, :])
        coded = (codes.codes.astype(np.float64) * codes.scale[:, None]) @ (
            probe_codes.codes[0].astype(np.float64) * probe_codes.scale[0]
        )
        exact = rows.astype(np.float64) @ probe.astype(np.float64)
        bound = codes.residual + probe_codes.residual[0] * codes.code_norm
        assert np.all(np.abs(exact - coded) <= bound + 1e-9)


def test_the_first_pass_leaves_few_rows_to_score_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    rows = _clustered(rng, 40_000)
    held = [ScanRows.of(rows)]
    scored: list[int] = []
    exact = bounded_scan._exact

    def counting(matrices: list[ScanRows],
                 probe: NDArray[np.float32], positions: NDArray[np.intp]) -> NDArray[np.float32]:
        scored.append(len(positions))
        return exact(matrices, probe, positions)

    monkeypatch.setattr(bounded_scan, "_exact", counting)
    probe = _normalised(rng.standard_normal((1, 384)))[0]
    tiebreak = np.arange(len(rows), dtype=np.int64)
    np.testing.assert_array_equal(nearest(held, probe, _parts(tiebreak, held), 50),
                                  _full([rows], probe, tiebreak, 50))
    assert len(scored) == 1  # the bounded pass ran, and scored only its survivors exactly
    assert scored[0] < len(rows) * bounded_scan.MAX_SURVIVOR_SHARE


def test_searches_take_no_reference_from_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """simsimd 6.5's cdist(out=...) returns None without a reference of its own: a process
    that searched long enough died at "deallocating None". A search, split with the helper or
    not, leaves None's reference count where it was."""
    monkeypatch.setattr(bounded_scan, "SPLIT_ROWS", 4096)
    rng = np.random.default_rng(4)
    rows = _clustered(rng, 12_000)
    held = [ScanRows.of(part) for part in np.split(rows, [5_000, 9_000])]
    probe = _normalised(rng.standard_normal((1, 384)))[0]
    nearest(held, probe, None, 10)  # warm: lazily created objects
    before = sys.getrefcount(None)
    for _ in range(400):
        nearest(held, probe, None, 10)
    assert sys.getrefcount(None) - before > -20  # one per piece (3-4 a search): -1,200 or more


def test_identical_rows_fall_back_to_the_full_scan_with_ties_by_tiebreak() -> None:
    rows = np.tile(_normalised(np.ones((1, 384))), (6000, 1))
    tiebreak = np.arange(6000, dtype=np.int64)[::-1].copy()
    picked = nearest([ScanRows.of(rows)], rows[0], [tiebreak], 10)
    np.testing.assert_array_equal(picked, _full([rows], rows[0], tiebreak, 10))
    assert picked.tolist() == list(range(5999, 5989, -1))  # every row is tied: by tiebreak


def test_rows_with_nan_or_infinity_are_treated_as_the_full_scan_treats_them() -> None:
    rng = np.random.default_rng(11)
    rows = _clustered(rng, 20_000)
    rows[[5, 700, 19_999]] = np.nan
    rows[1234, 7] = np.inf
    tiebreak = np.arange(len(rows), dtype=np.int64)
    held = [ScanRows.of(rows)]
    for probe in (rows[3], rows[40], _normalised(rng.standard_normal((1, 384)))[0]):
        for k in (1, 10, 100):
            np.testing.assert_array_equal(nearest(held, probe, _parts(tiebreak, held), k),
                                          _full([rows], probe, tiebreak, k))


def test_small_or_empty_scopes_are_scanned_in_full() -> None:
    rng = np.random.default_rng(5)
    rows = _clustered(rng, 500)
    tiebreak = np.arange(500, dtype=np.int64)
    np.testing.assert_array_equal(nearest([ScanRows.of(rows)], rows[3], [tiebreak], 10),
                                  _full([rows], rows[3], tiebreak, 10))
    assert len(nearest([], rows[3], [], 10)) == 0
    assert len(nearest([ScanRows.of(rows)], rows[3], None, 0)) == 0


KERNELS = ("turin", "sapphire", "genoa", "ice", "skylake", "haswell")


@pytest.mark.parametrize("disabled", range(len(KERNELS) + 1))
def test_every_int8_kernel_of_this_cpu_gives_the_exact_integer_products(disabled: int) -> None:
    """simsimd picks a kernel for the CPU at run time (AVX-512 VNNI on one machine, AVX2 or
    plain C on another): each must give the exact products, extreme codes included, and the
    bounded pass the full scan's answer."""
    import simsimd

    available = {name for name, on in simsimd.get_capabilities().items()
                 if on and name in KERNELS}
    try:
        for name in KERNELS[:disabled]:
            if name in available:
                simsimd.disable_capability(name)
        rng = np.random.default_rng(disabled)
        codes = rng.choice(np.array([-127, -1, 0, 1, 127], dtype=np.int8), (3000, 384))
        probe = rng.choice(np.array([-127, 127], dtype=np.int8), 384)
        codes[0], codes[1] = probe, -probe
        got = np.asarray(simsimd.cdist(probe[None, :], codes, metric="dot", out_dtype="float32"))
        np.testing.assert_array_equal(got[0].astype(np.int64),
                                      codes.astype(np.int64) @ probe.astype(np.int64))
        rows = _clustered(rng, 12_000)
        tiebreak = np.arange(len(rows), dtype=np.int64)
        np.testing.assert_array_equal(nearest([ScanRows.of(rows)], rows[9], [tiebreak], 20),
                                      _full([rows], rows[9], tiebreak, 20))
    finally:
        for name in available:
            simsimd.enable_capability(name)
