"""The k nearest rows of the vector caches' matrices, exactly, from a bounded int8 first pass.

An exact scan reads every float32 row: 1.5 kB a 384-d vector, ~13.5 ms for a scope of 200k
chunks (a 1M-chunk corpus, ten of fifty projects), bound by memory bandwidth whatever the
code. Each matrix therefore also keeps its rows as int8 codes (one scale a row, a quarter
of the bytes) and, per row, how far the codes may be from the row: `residual` =
|row - scale * codes| and `code_norm` = |scale * codes|. For a probe p (length 1) and its own
codes p' (residual e), Cauchy-Schwarz bounds the error of the coded product:

    |p . row - p' . row'|  <=  |p| |row - row'| + |p - p'| |row'|  =  residual + e * code_norm

so every row gets an interval [low, high] around its coded product. With tau the k-th
largest `low`, a row whose `high` is below tau has a similarity below k others' and cannot
be among the k nearest or tied with the k-th; the rest (a few hundred rows of 200k on the
benchmark's corpus) are scored exactly from their float32 rows, and the k nearest are
picked from those as the full scan picks them. The answer is the full scan's, position for
position (tests compare them); only the cost changes: the int8 products (simsimd's SIMD
kernels, ~2.8 ms for 200k rows) and the exact products of the survivors.

`SLACK` covers the float32 rounding of the exact products (at most ~2.3e-5 for 384
dimensions) on both sides of the comparison, and that of the coded products' scaling
(~1e-7). A scope too small to be worth the first pass, or one whose intervals leave too
many survivors (rows nearly all alike), is scanned in full.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import simsimd
from numpy.typing import NDArray

from service.store.matrices import cosine_distances, nearest_positions

_T = TypeVar("_T")

SLACK = 1e-4
ROUND_UP = 1.0 + 1e-4  # the per-row norms' margin for their float32 arithmetic
CODE_MAX = 127.0
# Below this many rows in all the full scan is as cheap as the first pass.
MIN_ROWS = 4096
# Survivors past this share of the scope: the full scan is cheaper than gathering them.
MAX_SURVIVOR_SHARE = 0.125
# tau comes from every SAMPLE_STEP-th row first (its k-th largest `low` is at most the
# scope's), then exactly from the rows at or above that: no partition of the whole scope.
SAMPLE_STEP = 16
# From this many rows the first pass is shared with a helper thread (_Helper), in pieces
# of PIECE_ROWS rows that either thread takes (~1 ms each).
SPLIT_ROWS = 65_536
PIECE_ROWS = 32_768


@dataclass(frozen=True)
class Codes:
    """The int8 codes of a normalised float32 matrix and their per-row error bounds."""

    codes: NDArray[np.int8]
    scale: NDArray[np.float32]
    residual: NDArray[np.float32]
    code_norm: NDArray[np.float32]

    @property
    def nbytes(self) -> int:
        return int(
            self.codes.nbytes + self.scale.nbytes + self.residual.nbytes + self.code_norm.nbytes
        )


@dataclass(frozen=True)
class ScanRows:
    """What `nearest` scans: a normalised float32 matrix (one vector a row) and its codes."""

    rows: NDArray[np.float32]
    codes: Codes

    @classmethod
    def of(cls, rows: NDArray[np.float32]) -> ScanRows:
        """`rows` with their codes."""
        return cls(rows, encode(rows))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes) + self.codes.nbytes


def row_bytes(dimensions: int) -> int:
    """What one row of `dimensions` takes in a ScanRows: its floats, codes and bounds."""
    return int(dimensions) * 4 + int(dimensions) + 3 * 4


def encode(rows: NDArray[np.float32]) -> Codes:
    """Codes of `rows` (a float32 matrix, one vector a row). A row with a NaN or an infinity
    (only a writer behind the store's back makes one) gets zero codes and an infinite bound:
    it always reaches the exact pass, which treats it as the full scan does."""
    finite = np.asarray(np.isfinite(rows).all(axis=1), dtype=np.bool_)
    clean = rows if finite.all() else np.where(finite[:, None], rows, np.float32(0.0))
    codes, scale = _quantise(clean)
    decoded = codes * scale[:, None]
    error = clean - decoded
    # float32 sums of 384 squares are within ~2.3e-5 of the exact ones (relative): the
    # norms are rounded up by ROUND_UP, so the bounds never fall below the exact ones.
    residual = np.sqrt(np.einsum("ij,ij->i", error, error)) * np.float32(ROUND_UP)
    residual[~finite] = np.inf
    code_norm = np.sqrt(np.einsum("ij,ij->i", decoded, decoded)) * np.float32(ROUND_UP)
    return Codes(codes, scale, residual, code_norm)


def nearest(
    matrices: Sequence[ScanRows],
    probe: NDArray[np.float32],
    tiebreaks: Sequence[NDArray[np.int64]] | None,
    k: int,
) -> NDArray[np.intp]:
    """What `nearest_positions(cosine_distances(rows...), tiebreak, k)` returns for the
    concatenated rows of `matrices` and a `probe` of length 1 (or 0), position for position;
    `tiebreaks`: each matrix's part of `tiebreak` (None: the positions themselves), only
    read where needed (a scope's concatenation is ~1.6 MB at 200k rows)."""
    total = sum(len(m) for m in matrices)
    if total < max(MIN_ROWS, SAMPLE_STEP * k) or k <= 0 or not np.isfinite(probe).all():
        return _full(matrices, probe, tiebreaks, k)
    probe_codes, probe_scale = _quantise(probe[None, :])
    probe_residual = float(
        np.linalg.norm(probe.astype(np.float64) - probe_codes[0] * float(probe_scale[0]))
    )
    # In place, one buffer each: at 200k rows every temporary is ~0.1 ms of memory traffic.
    coded = np.empty(total, dtype=np.float32)
    bound = np.empty(total, dtype=np.float32)
    pieces = _pieces(matrices)
    scales = (probe_scale[0], np.float32(probe_residual))

    def first_pass(piece: _Piece) -> None:
        _first_pass(piece, probe_codes, scales, coded, bound)

    if total >= SPLIT_ROWS:
        _HELPER.share(_cut(pieces, PIECE_ROWS), first_pass)
    else:
        for piece in pieces:
            first_pass(piece)
    tau = _kth_largest(coded - bound, k)
    coded += bound  # each row's upper bound
    survivors = np.flatnonzero(coded >= tau)
    if len(survivors) > MAX_SURVIVOR_SHARE * total:
        return _full(matrices, probe, tiebreaks, k)
    distances = _exact(matrices, probe, survivors)
    order = survivors if tiebreaks is None else take(tiebreaks, survivors)
    return survivors[nearest_positions(distances, order, k)]


def take(parts: Sequence[NDArray[Any]], positions: NDArray[np.intp]) -> NDArray[Any]:
    """`np.concatenate(parts)[positions]` without the concatenation."""
    starts = np.cumsum([0] + [len(p) for p in parts], dtype=np.int64)
    which = np.searchsorted(starts, positions, side="right") - 1
    found = np.empty(len(positions), dtype=parts[0].dtype if parts else np.int64)
    for part in np.unique(which).tolist():
        chosen = which == part
        found[chosen] = parts[part][positions[chosen] - starts[part]]
    return found


_Piece = tuple[Codes, int, int, int]  # a matrix's codes, its rows [lo, hi), where they go


def _pieces(matrices: Sequence[ScanRows]) -> list[_Piece]:
    pieces, start = [], 0
    for matrix in matrices:
        pieces.append((matrix.codes, 0, len(matrix), start))
        start += len(matrix)
    return pieces


def _cut(pieces: list[_Piece], size: int) -> list[_Piece]:
    """`pieces` cut into runs of at most `size` rows (a longer matrix becomes several)."""
    cut: list[_Piece] = []
    for codes, lo, hi, start in pieces:
        for at in range(lo, hi, size):
            cut.append((codes, at, min(at + size, hi), start + at - lo))
    return cut


def _first_pass(
    piece: _Piece,
    probe_codes: NDArray[np.int8],
    scales: tuple[np.float32, np.float32],
    coded: NDArray[np.float32],
    bound: NDArray[np.float32],
) -> None:
    """Each row's coded product with the probe (`coded`) and its error bound (`bound`) for
    the rows of `piece`; `scales`: the probe's code scale and residual."""
    probe_scale, probe_residual = scales
    codes, lo, hi, start = piece
    end = start + hi - lo
    # Not `out=`: simsimd 6.5 returns None from cdist(out=...) without a reference of its
    # own, so every call took one from None, and a long-running process died
    # ("deallocating None") once they were used up. The products are scaled into `coded`.
    products = np.asarray(simsimd.cdist(
        probe_codes, codes.codes[lo:hi], metric="dot", out_dtype="float32"))
    np.multiply(products[0], codes.scale[lo:hi], out=coded[start:end])
    coded[start:end] *= probe_scale
    np.multiply(codes.code_norm[lo:hi], probe_residual, out=bound[start:end])
    bound[start:end] += codes.residual[lo:hi]
    bound[start:end] += np.float32(SLACK)


class _Helper:
    """One thread that takes pieces of a large first pass while the searching thread takes
    the others (simsimd's kernels and numpy's release the GIL). Two threads read codes that
    are still in the CPU's cache ~1.7x faster than one; codes read from memory, as between
    sporadic searches, barely faster on a 2-core VM (benchmarks/RESULTS.md, "Bounded scan:
    warm and cold caches"). Each thread takes the next piece not yet taken, so a search
    never waits for the helper to start: a helper that wakes late (its core was idle, or
    busy with another process) takes fewer pieces, or none, and the search waits only for a
    piece the helper is still working on. A search never waits for another search either:
    when the helper is busy, or the machine has one core, the caller does every piece."""

    def __init__(self) -> None:
        self._free = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self.enabled = len(os.sched_getaffinity(0)) > 1 if hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1) > 1

    def share(self, items: Sequence[_T], work: Callable[[_T], None]) -> None:
        """`work(item)` once for every item, here and on the helper thread when it is free.
        Returns when every item is done (they write into shared buffers); an error raised by
        `work` on either thread is raised here."""
        queue = _Queue(len(items))
        if self.enabled and self._free.acquire(blocking=False):
            try:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(1, thread_name_prefix="bounded-scan")
                self._pool.submit(self._help, queue, items, work)
            except RuntimeError:
                # The interpreter is shutting down (no new threads, no new work for the
                # pool): this search does every piece itself.
                self._free.release()
            except BaseException:
                self._free.release()
                raise
        try:
            while (index := queue.take(helper=False)) is not None:
                work(items[index])
        except BaseException:
            queue.stop()
            raise
        finally:
            queue.wait()
        if queue.error is not None:
            raise queue.error

    def _help(self, queue: _Queue, items: Sequence[_T], work: Callable[[_T], None]) -> None:
        try:
            while (index := queue.take(helper=True)) is not None:
                try:
                    work(items[index])
                except BaseException as error:
                    queue.stop(error)
                finally:
                    queue.returned()
        finally:
            self._free.release()


class _Queue:
    """The next item of a shared first pass, and the items the helper is working on."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._next = 0
        self._out = 0  # items taken by the helper and not yet done
        self._done = threading.Condition(threading.Lock())
        self.error: BaseException | None = None

    def take(self, helper: bool) -> int | None:
        with self._done:
            if self._next >= self._count:
                return None
            self._next += 1
            self._out += helper
            return self._next - 1

    def returned(self) -> None:
        with self._done:
            self._out -= 1
            if not self._out:
                self._done.notify_all()

    def stop(self, error: BaseException | None = None) -> None:
        """No item is taken any more (an item failed)."""
        with self._done:
            self._next = self._count
            if error is not None and self.error is None:
                self.error = error

    def wait(self) -> None:
        with self._done:
            self._done.wait_for(lambda: not self._out)


_HELPER = _Helper()


def _quantise(rows: NDArray[np.float32]) -> tuple[NDArray[np.int8], NDArray[np.float32]]:
    peak = np.abs(rows).max(axis=1) if rows.size else np.zeros(len(rows), dtype=np.float32)
    scale = np.where(peak > 0, peak / np.float32(CODE_MAX), np.float32(1.0)).astype(np.float32)
    codes = np.clip(np.rint(rows / scale[:, None]), -CODE_MAX, CODE_MAX).astype(np.int8)
    return codes, scale


def _kth_largest(values: NDArray[np.float32], k: int) -> np.float32:
    """The k-th largest of `values` (len > SAMPLE_STEP * k) without partitioning them all:
    the sample's k-th largest is a lower bound, and every value at or above it is kept."""
    sample = values[::SAMPLE_STEP]
    floor = np.partition(sample, len(sample) - k)[len(sample) - k]
    above = values[values >= floor]
    return np.float32(np.partition(above, len(above) - k)[len(above) - k])


def _exact(
    matrices: Sequence[ScanRows],
    probe: NDArray[np.float32],
    positions: NDArray[np.intp],
) -> NDArray[np.float32]:
    """The full scan's distances of the rows at `positions` (ascending) of the concatenation."""
    parts = []
    start = 0
    for matrix in matrices:
        end = start + len(matrix)
        lo, hi = np.searchsorted(positions, [start, end])
        if hi > lo:
            parts.append(matrix.rows[positions[lo:hi] - start])
        start = end
    if not parts:
        return np.empty(0, dtype=np.float32)
    return cosine_distances(parts, probe)


def _full(
    matrices: Sequence[ScanRows],
    probe: NDArray[np.float32],
    tiebreaks: Sequence[NDArray[np.int64]] | None,
    k: int,
) -> NDArray[np.intp]:
    if not matrices:
        return np.empty(0, dtype=np.intp)
    total = sum(len(m) for m in matrices)
    order = np.arange(total, dtype=np.int64) if tiebreaks is None else np.concatenate(tiebreaks)
    return nearest_positions(cosine_distances((m.rows for m in matrices), probe), order, k)
