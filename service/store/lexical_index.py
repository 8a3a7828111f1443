"""In-process postings of the lexical channel and the exact BM25 ranking over a scope (#18).

The PostgreSQL statement scores BM25 from `term_postings` rows: each query term's postings
in the scope are read, each posting's part computed and the parts summed per document, all
in SQL (~3-4 ms at 100k chunks, growing with the matches). Held in process as arrays, the
same arithmetic is a few vector operations over the same postings. This module holds one
project's postings (its content-column lexemes only) and computes the ranking of a scope
exactly as the statement does, operation by operation in float64, so the scores are the
statement's to the last bit:

    part = ln(1 + (N - df + 0.5) / (df + 0.5)) * tf * (k1 + 1)
           / (tf + k1 * (1 - b + b * dl / avgdl))
    score = the parts summed in term order (`k`: byte order of the lexemes)

with N and avgdl the scope's (summed lexical_stats), df a term's documents in the scope, a
prefix term holding every lexeme it starts (tf that of the exact lexeme, 1 when a document
holds only longer ones). Membership is counted, as FTS_TIERED_BY_COUNT does: a document
holding `strict_at` terms is tier 1, one holding fewer is tier 0 and listed only when the
query has a relaxed form (`any_term`).

Pure: the stores load the arrays and check, in their statement, that what this computed
from is what the database holds (generations, statistics, the query's parsed terms, idf).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

PREFIX_END = chr(0x10FFFF)  # lexemes with a prefix p lie in [p, p + PREFIX_END), as in SQL
KEY_OVERHEAD = 96  # bytes a document's key costs besides the arrays, as Python holds it
MAX_MASKS = 16  # kind filters remembered per project (all forgotten when full)
# A term's postings in one project (ProjectPostings.postings_of): first, end of the exact
# lexeme's, end, several lexemes.
Span = tuple[int, int, int, bool]


@dataclass(frozen=True)
class ProjectPostings:
    """One project's postings at one generation: documents in identity order (kind, then
    row id, byte order), lexemes in byte order, each lexeme's documents ascending."""

    generation: int
    n: int  # documents (lexical_stats.n)
    sum_dl: int  # their summed lengths (lexical_stats.sum_dl)
    kinds: list[str]
    row_ids: list[str]
    lengths: NDArray[np.float64]  # each document's length, dl
    vocabulary: list[str]
    starts: NDArray[np.int64]  # lexeme i's postings: docs[starts[i]:starts[i + 1]]
    docs: NDArray[np.int32]
    tfs: NDArray[np.uint16]  # PostgreSQL counts at most 256 positions of a lexeme
    positions: dict[str, int] = field(default_factory=dict)  # lexeme -> its index
    # Where the lexemes starting with lexeme i end (a prefix term's range without a search).
    prefix_ends: NDArray[np.int32] = field(default_factory=lambda: np.empty(0, np.int32))

    documents: dict[tuple[str, str], int] = field(default_factory=dict)  # filled on demand
    masks: dict[frozenset[str], NDArray[np.bool_]] = field(default_factory=dict)  # on demand

    def __post_init__(self) -> None:
        if not self.positions:
            self.positions.update((word, i) for i, word in enumerate(self.vocabulary))
        if len(self.prefix_ends) != len(self.vocabulary):
            words = self.vocabulary
            ends = [bisect.bisect_left(words, w + PREFIX_END, i) for i, w in enumerate(words)]
            object.__setattr__(self, "prefix_ends", np.asarray(ends, dtype=np.int32))

    def document(self, kind: str, row_id: str) -> int | None:
        """The index of the document (kind, row_id), if the project holds it."""
        if not self.documents and self.kinds:
            self.documents.update(
                (key, i) for i, key in enumerate(zip(self.kinds, self.row_ids, strict=True))
            )
        return self.documents.get((kind, row_id))

    def of_kinds(self, kinds: frozenset[str]) -> NDArray[np.bool_]:
        """Which documents are of one of `kinds` (a kind filter; a document's kind is part
        of its identity, so the mask holds as long as the postings do)."""
        mask = self.masks.get(kinds)
        if mask is None:
            if len(self.masks) >= MAX_MASKS:
                self.masks.clear()
            mask = np.fromiter((k in kinds for k in self.kinds), dtype=bool, count=len(self.kinds))
            self.masks[kinds] = mask
        return mask

    @cached_property
    def nbytes(self) -> int:
        arrays = (self.lengths.nbytes + self.starts.nbytes + self.docs.nbytes + self.tfs.nbytes
                  + self.prefix_ends.nbytes)
        words = sum(len(w) + 160 for w in self.vocabulary)  # the string, its list and dict slots
        return int(arrays) + words + KEY_OVERHEAD * len(self.kinds)

    def span(self, lexeme: str, prefix: bool) -> tuple[int, int, bool]:
        """The vocabulary range a term holds (one lexeme, or every lexeme a prefix starts)
        and whether its first lexeme is the term's own."""
        words = self.vocabulary
        at = self.positions.get(lexeme)
        if at is None:
            if not prefix:
                return 0, 0, False
            at = bisect.bisect_left(words, lexeme)
            if at == len(words) or not words[at].startswith(lexeme):
                return at, at, False
            return at, bisect.bisect_left(words, lexeme + PREFIX_END, at), False
        if not prefix:
            return at, at + 1, True
        return at, self.prefix_ends.item(at), True

    def postings_of(self, lexeme: str, prefix: bool) -> Span:
        """The postings a term holds (`span`'s lexemes): where they start, where the term's
        own lexeme's end (the start when it has none), where they end, and whether they
        cover several lexemes (a document may then be listed more than once)."""
        low, high, exact = self.span(lexeme, prefix)
        if low == high:
            return 0, 0, 0, False
        starts = self.starts
        first = starts.item(low)
        return first, starts.item(low + 1) if exact else first, starts.item(high), high - low > 1


_NO_TFS = np.empty(0, dtype=np.float64)
_NO_DOCS = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class LexicalCacheStats:
    """A store's in-process postings (service.store.postgres.lexical_cache,
    service.store.sqlite.lexical_cache)."""

    projects: int
    bytes: int
    budget_bytes: int
    loads: int  # projects read from the database (first use, or after a change)
    evictions: int  # projects dropped to stay within the budget
    served: int  # searches the statement ranked from the in-process ranking
    fallbacks: int  # searches offered a ranking that the statement ranked in SQL instead


@dataclass(frozen=True)
class Term:
    lexeme: str
    prefix: bool


@dataclass(frozen=True)
class Ranking:
    """A scope's lexical ranking: the listed documents in page order (scope position of
    the project, document index), their scores and tiers, and what the statement checks."""

    positions: NDArray[np.int64]  # index into the scope's projects
    documents: NDArray[np.int64]  # index into that project's documents
    scores: NDArray[np.float64]
    tiers: NDArray[np.int64]
    ranks: NDArray[np.int64]  # 1-based places in the whole list
    total: int
    top: float | None
    relaxed: bool
    n: float
    avgdl: float
    dfs: list[float]
    idfs: list[float]


def scope_avgdl(n: int, sum_dl: int) -> float:
    """avgdl as SCOPE_STATS computes it: sum_dl / n, 1 when either is 0 (the statement
    checks that its own division agrees)."""
    if n == 0 or sum_dl == 0:
        return 1.0
    return sum_dl / n  # int / int: the correctly rounded quotient, as float(Fraction) is


def term_spans(scope: Sequence[ProjectPostings], terms: Sequence[Term]) -> list[list[Span]]:
    """Each term's postings in each scope project (by term, then project)."""
    return [[p.postings_of(term.lexeme, term.prefix) for p in scope] for term in terms]


def postings_count(spans: Sequence[Sequence[Span]]) -> int:
    """The postings `rank` reads for terms of these `spans` (its work: ~10 ns each)."""
    return sum(last - first for of_term in spans for first, _, last, _ in of_term)


def rank(
    scope: list[ProjectPostings],
    terms: list[Term],
    k1: float,
    b: float,
    strict_at: int,
    any_term: bool,
    wanted: int,
    also: Sequence[tuple[int, int]] = (),
    spans: Sequence[Sequence[Span]] | None = None,
    eligible: Sequence[NDArray[np.bool_]] | None = None,
    sqlite: bool = False,
    by_score: bool = False,
) -> Ranking:
    """The scope's documents holding the terms, the first `wanted` in page order (tier,
    score descending, then identity: scope projects ascending, documents in their order),
    then those of `also` ((scope position, document index) pairs) that are listed further
    down, each with its place in the whole list; and the exact total, top score and
    relaxation flag of the whole list. `spans`: term_spans(scope, terms), if known.
    `eligible`: each project's documents that pass the filters (N, avgdl and every df are
    then those of the eligible documents, as search_sql's ELIGIBLE_STATS counts them).
    `sqlite`: the SQLite statement's arithmetic (`sqlite_parts`, summed as its SUM does)
    instead of PostgreSQL's. `by_score`: the order (the first rows and the places) is by
    score alone, then identity, as HYBRID's SUM fusion reads the list; the tiers returned
    stay the documents' own."""
    if spans is None:
        spans = term_spans(scope, terms)
    mask = None
    if eligible is None:
        n_docs, sum_dl = sum(p.n for p in scope), sum(p.sum_dl for p in scope)
    else:
        mask = np.concatenate(list(eligible)) if scope else np.empty(0, dtype=bool)
        n_docs = int(np.count_nonzero(mask))
        # Lengths are integers held as float64: their sum is exact below 2**53.
        sum_dl = sum(int(p.lengths[m].sum()) for p, m in zip(scope, eligible, strict=True))
    n = float(n_docs)
    avgdl = scope_avgdl(n_docs, sum_dl)
    offsets = np.cumsum([0] + [len(p.kinds) for p in scope], dtype=np.int64)
    bases = offsets.tolist()
    # Work over the documents holding a term (sorted scope positions), not the whole scope:
    # the cost follows the postings read.
    postings = [_postings(scope, bases, of_term) for of_term in spans]
    if mask is not None:
        eligible_postings = []
        for at, tf, dl in postings:
            keep = mask[at]
            eligible_postings.append((at[keep], tf[keep], dl[keep]))
        postings = eligible_postings
    held = _distinct([at for at, _, _ in postings])
    scores = np.zeros(len(held), dtype=np.float64)
    hits = np.zeros(len(held), dtype=np.int64)
    errors = np.zeros(len(held), dtype=np.float64) if sqlite else None
    dfs, idfs = [], []
    for at, tf, dl in postings:
        df = float(len(at))
        idf = math.log(1.0 + (((n - df) + 0.5) / (df + 0.5)))
        dfs.append(df)
        idfs.append(idf)
        if not len(at):
            continue
        where = np.searchsorted(held, at)  # each document once per term
        if errors is None:
            part = ((idf * tf) * (k1 + 1.0)) / (tf + k1 * ((1.0 - b) + ((b * dl) / avgdl)))
            scores[where] += part
        else:
            part = sqlite_parts(n_docs, int(df), k1, b, avgdl, tf, dl)
            _compensated_add(scores, errors, where, part)
        hits[where] += 1
    if errors is not None:
        scores += errors
    chosen_held = slice(None) if any_term else np.flatnonzero(hits >= strict_at)
    listed = held[chosen_held]
    tiers = (hits[chosen_held] >= strict_at).astype(np.int64)
    listed_scores = scores[chosen_held]
    total = len(listed)
    top = float(listed_scores.max()) if total else None
    relaxed = bool(total and tiers.min() == 0)
    ordering = np.ones_like(tiers) if by_score else tiers
    order = _first(listed_scores, ordering, wanted)
    ranks = np.arange(1, len(order) + 1, dtype=np.int64)
    if also and total:
        extra = _places(listed, listed_scores, ordering, order, offsets, also)
        order = np.concatenate([order, extra[0]])
        ranks = np.concatenate([ranks, extra[1]])
    chosen = listed[order]
    position = np.searchsorted(offsets, chosen, side="right") - 1
    return Ranking(
        positions=position.astype(np.int64),
        documents=chosen - offsets[position],
        scores=listed_scores[order],
        tiers=tiers[order],
        ranks=ranks,
        total=total, top=top, relaxed=relaxed, n=n, avgdl=avgdl, dfs=dfs, idfs=idfs,
    )


def sqlite_parts(
    n: int, df: int, k1: float, b: float, avgdl: float,
    tf: NDArray[np.float64], dl: NDArray[np.float64],
) -> NDArray[np.float64]:
    """One term's BM25 parts as SQLite's `term_weights` / `term_tf` compute them (search_sql
    BM25): w * tf / (tf + c0 + c1 * dl), with n - df an integer difference, w = ln(1 + (n -
    df + 0.5) / (df + 0.5)) * (k1 + 1), c0 = k1 * (1 - b) and c1 = k1 * b / avgdl; `ln` is
    the C library's log, as SQLite's."""
    w = math.log(1.0 + (float(n - df) + 0.5) / (float(df) + 0.5)) * (k1 + 1.0)
    c0 = k1 * (1.0 - b)
    c1 = k1 * b / avgdl
    parts: NDArray[np.float64] = (w * tf) / ((tf + c0) + (c1 * dl))
    return parts


def _compensated_add(
    sums: NDArray[np.float64], errors: NDArray[np.float64], at: NDArray[np.int64],
    values: NDArray[np.float64],
) -> None:
    """One step of SQLite's SUM (Kahan-Babuska-Neumaier, since 3.43) for the documents `at`
    (each once): the running sums move to `sums`, their rounding errors add up in `errors`;
    SUM's result is sums + errors. Of positive parts (BM25's, whose idf is positive) the
    result is the correctly rounded sum, whatever order SQLite adds them in (checked against
    math.fsum and over permutations by tests/store/test_lexical_index_sqlite.py)."""
    before = sums[at]
    after = before + values
    errors[at] += np.where(
        np.abs(before) > np.abs(values), (before - after) + values, (values - after) + before
    )
    sums[at] = after


def _places(
    listed: NDArray[np.int64],
    scores: NDArray[np.float64],
    tiers: NDArray[np.int64],
    first: NDArray[np.intp],
    offsets: NDArray[np.int64],
    also: Sequence[tuple[int, int]],
) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
    """Indexes into `listed` of the `also` documents that are listed but not among `first`,
    and their 1-based places in the whole list: the documents of a higher tier, of the same
    tier with a higher score, and of the same tier and score before them by identity, plus
    one. One sort of each tier's scores, not of the list."""
    wanted = np.unique(np.asarray([int(offsets[p]) + d for p, d in also], dtype=np.int64))
    at = np.searchsorted(listed, wanted)
    inside = at < len(listed)
    at = at[inside]
    at = at[listed[at] == wanted[inside]]
    at = np.setdiff1d(at, first)
    if not len(at):
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.int64)
    upper = tiers > 0
    places = np.empty(len(at), dtype=np.int64)
    for tier, same, above in ((1, upper, 0), (0, ~upper, int(upper.sum()))):
        mine = tiers[at] == tier
        if not mine.any():
            continue
        ordered = np.sort(scores[same])
        own = scores[at[mine]]
        right = np.searchsorted(ordered, own, side="right")
        left = np.searchsorted(ordered, own, side="left")
        found = above + (len(ordered) - right) + 1
        for i in np.flatnonzero(right - left > 1).tolist():
            # Equal scores in its tier: identity (position in `listed`) decides.
            index = int(at[mine][i])
            found[i] += int(np.count_nonzero((tiers[:index] == tier) & (scores[:index] == own[i])))
        places[mine] = found
    return at.astype(np.intp), places


def _postings(
    scope: list[ProjectPostings], offsets: list[int], spans: Sequence[Span]
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """The scope documents (positions in the scope; `offsets`: where each project's
    documents start, then the scope's size) holding a term (its `spans`, by project), each
    once, with its tf in each and their lengths: the exact lexeme's tf, 1 for a document
    holding only longer lexemes of a prefix (the SQL's `COALESCE(max(tf) FILTER (WHERE
    lexeme = term), 1)`)."""
    docs: list[NDArray[np.int32]] = []
    tfs: list[NDArray[np.uint16]] = []
    lengths: list[NDArray[np.float64]] = []
    bases: list[int] = []
    sizes: list[int] = []
    longer: list[tuple[int, int]] = []  # ranges of postings of longer lexemes (tf 1)
    spread = False  # some project's range spans several lexemes: its documents repeat
    count = 0
    for base, postings, (first, cut, last, several) in zip(offsets, scope, spans, strict=False):
        if first == last:
            continue
        # The exact lexeme's postings come first in the range.
        of_project = postings.docs[first:last]
        docs.append(of_project)
        tfs.append(postings.tfs[first:last])
        lengths.append(postings.lengths[of_project])
        bases.append(base)
        sizes.append(last - first)
        if cut < last:
            longer.append((count + cut - first, count + last - first))
            spread = spread or several
        count += last - first
    if not docs:
        return _NO_DOCS, _NO_TFS, _NO_TFS
    at = np.concatenate(docs).astype(np.int64)
    at += np.repeat(np.asarray(bases, dtype=np.int64), sizes)
    tf = np.concatenate(tfs).astype(np.float64)
    dl = np.concatenate(lengths)
    for start, end in longer:
        tf[start:end] = 1.0
    if not spread:
        return at, tf, dl
    # A document once: its exact lexeme's posting when it has one (each document once among
    # those), else one of a longer lexeme's (tf 1).
    longer_lexeme = np.zeros(count, dtype=bool)
    for start, end in longer:
        longer_lexeme[start:end] = True
    order = np.lexsort((longer_lexeme, at))
    pick = order[_run_starts(at[order])]
    return at[pick], tf[pick], dl[pick]


def _distinct(parts: list[NDArray[np.int64]]) -> NDArray[np.int64]:
    """The values of `parts`, each once, ascending (a sort: numpy's unique hashes, ~5x
    slower on a few thousand positions)."""
    if not parts:
        return _NO_DOCS
    values = np.sort(np.concatenate(parts))
    return values[_run_starts(values)]


def _run_starts(ordered: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Where each run of equal values of the sorted `ordered` starts."""
    starts = np.ones(len(ordered), dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    return starts


def _first(scores: NDArray[np.float64], tiers: NDArray[np.int64], wanted: int) -> NDArray[np.intp]:
    """Positions of the first `wanted` by (tier desc, score desc, position asc)."""
    if wanted <= 0 or not len(scores):
        return np.empty(0, dtype=np.intp)
    upper = np.flatnonzero(tiers > 0)
    if len(upper) >= wanted:
        return _best(scores, upper, wanted)
    lower = np.flatnonzero(tiers == 0)
    return np.concatenate([_best(scores, upper, len(upper)),
                           _best(scores, lower, wanted - len(upper))])


def _best(scores: NDArray[np.float64], among: NDArray[np.intp], wanted: int) -> NDArray[np.intp]:
    """The `wanted` best of `among` (ascending positions) by score desc, then position."""
    if wanted <= 0 or not len(among):
        return np.empty(0, dtype=np.intp)
    values = scores[among]
    if len(among) > wanted:
        # Everything tied with the wanted-th score stays, so position decides the cut.
        cut = -np.partition(-values, wanted - 1)[wanted - 1]
        keep = values >= cut
        among, values = among[keep], values[keep]
    order = np.lexsort((among, -values))
    return among[order][:wanted]
