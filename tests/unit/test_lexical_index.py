"""The in-process BM25 ranking (service.store.lexical_index): order, ties and places."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator

import numpy as np

from service.store.lexical_index import ProjectPostings, Term, rank


def _project(rng: random.Random, docs: int, words: list[str]) -> ProjectPostings:
    """Documents of 1-4 words drawn from a few, so scores tie often."""
    held: dict[str, dict[int, int]] = {}
    lengths = []
    for doc in range(docs):
        picks = [rng.choice(words) for _ in range(rng.randrange(1, 5))]
        lengths.append(len(picks))
        for word in picks:
            held.setdefault(word, {}).setdefault(doc, 0)
            held[word][doc] += 1
    vocabulary = sorted(held)
    counts = [len(held[w]) for w in vocabulary]
    return ProjectPostings(
        generation=1, n=docs, sum_dl=sum(lengths),
        kinds=["note"] * docs, row_ids=[f"{i:04d}" for i in range(docs)],
        lengths=np.asarray(lengths, dtype=np.float64), vocabulary=vocabulary,
        starts=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        docs=np.asarray([d for w in vocabulary for d in sorted(held[w])], dtype=np.int32),
        tfs=np.asarray([held[w][d] for w in vocabulary for d in sorted(held[w])], dtype=np.uint16),
    )


def _draw(
    rng: random.Random, words: list[str], most: int
) -> tuple[list[ProjectPostings], list[Term]] | None:
    """1-3 projects of up to `most` documents and up to 3 terms (None when two terms share
    a lexeme)."""
    scope = [_project(rng, rng.randrange(1, most), words) for _ in range(rng.randrange(1, 4))]
    terms = sorted({Term(rng.choice(words), rng.random() < 0.5) for _ in range(3)},
                   key=lambda t: t.lexeme.encode())
    if len({t.lexeme for t in terms}) < len(terms):
        return None
    return scope, terms


def _cases(seed: int) -> Iterator[tuple[random.Random, list[ProjectPostings], list[Term]]]:
    """Up to 60 drawn scopes of up to 30 documents over a few words, with their terms."""
    rng = random.Random(seed)
    words = ["ab", "abc", "abd", "b", "bc", "c"]
    for _ in range(60):
        drawn = _draw(rng, words, 30)
        if drawn is not None:
            yield rng, *drawn


def test_places_of_other_documents_are_their_places_in_the_whole_list() -> None:
    for rng, scope, terms in _cases(7):
        strict_at = rng.choice([1, len(terms)])
        whole = rank(scope, terms, 1.2, 0.75, strict_at, True, 10_000)
        everyone = list(zip(whole.positions.tolist(), whole.documents.tolist(), strict=True))
        # The whole list is ordered by tier, score, then identity, places 1..n.
        keys = [(-t, -s, p, d) for t, s, (p, d) in
                zip(whole.tiers.tolist(), whole.scores.tolist(), everyone, strict=True)]
        assert keys == sorted(keys)
        assert whole.ranks.tolist() == list(range(1, len(everyone) + 1))
        place = {key: i + 1 for i, key in enumerate(everyone)}
        wanted = rng.randrange(0, 5)
        also = rng.sample(everyone, min(len(everyone), rng.randrange(0, 8)))
        also.append((0, 10_000))  # not a document: ignored
        part = rank(scope, terms, 1.2, 0.75, strict_at, True, wanted, also)
        got = list(zip(part.positions.tolist(), part.documents.tolist(), strict=True))
        assert got[:wanted] == everyone[:wanted]
        assert set(got) == set(everyone[:wanted]) | set(also[:-1])
        for key, found in zip(got, part.ranks.tolist(), strict=True):
            assert found == place[key]
        assert (part.total, part.top, part.relaxed) == (whole.total, whole.top, whole.relaxed)


def test_by_score_the_first_rows_and_places_ignore_the_tiers() -> None:
    """SUM's reading: the whole list by score, then identity, whatever the tier; the tiers
    returned are still the documents' own, and the whole list's figures do not change."""
    for rng, scope, terms in _cases(40):
        strict_at = len(terms)
        tiered = rank(scope, terms, 1.2, 0.75, strict_at, True, 10_000)
        whole = rank(scope, terms, 1.2, 0.75, strict_at, True, 10_000, by_score=True)
        everyone = list(zip(whole.positions.tolist(), whole.documents.tolist(), strict=True))
        keys = [(-s, p, d) for s, (p, d) in zip(whole.scores.tolist(), everyone, strict=True)]
        assert keys == sorted(keys)
        listed = zip(tiered.positions.tolist(), tiered.documents.tolist(), strict=True)
        tier_of = dict(zip(listed, tiered.tiers.tolist(), strict=True))
        assert whole.tiers.tolist() == [tier_of[key] for key in everyone]
        assert (whole.total, whole.top, whole.relaxed) == (
            tiered.total, tiered.top, tiered.relaxed)
        place = {key: i + 1 for i, key in enumerate(everyone)}
        wanted = rng.randrange(1, 5)
        also = rng.sample(everyone, min(len(everyone), rng.randrange(0, 8)))
        part = rank(scope, terms, 1.2, 0.75, strict_at, True, wanted, also, by_score=True)
        got = list(zip(part.positions.tolist(), part.documents.tolist(), strict=True))
        assert got[:wanted] == everyone[:wanted]
        if everyone:
            assert part.scores[0] == whole.top  # the first row is the list's best
        for key, found in zip(got, part.ranks.tolist(), strict=True):
            assert found == place[key]


def _term_frequencies(
    scope: list[ProjectPostings], term: Term, ok: Callable[[int, int], bool]
) -> dict[tuple[int, int], float]:
    """The eligible documents holding `term`, by (project position, document), with its tf:
    the exact lexeme's, 1 when a document holds only longer lexemes of a prefix."""
    found: dict[tuple[int, int], float] = {}
    for p, proj in enumerate(scope):
        for i, word in enumerate(proj.vocabulary):
            if word != term.lexeme and not (term.prefix and word.startswith(term.lexeme)):
                continue
            for at in range(int(proj.starts[i]), int(proj.starts[i + 1])):
                d = int(proj.docs[at])
                if not ok(p, d):
                    continue
                if word == term.lexeme:
                    found[(p, d)] = float(proj.tfs[at])
                else:
                    found.setdefault((p, d), 1.0)
    return found


def _reference(
    scope: list[ProjectPostings], terms: list[Term], k1: float, b: float,
    eligible: list[np.ndarray] | None, sqlite: bool,
) -> dict[tuple[int, int], tuple[float, int]]:
    """Every scope document holding a term, by (project position, document): its BM25
    score and its number of terms, computed one document at a time from the postings as
    the store's statement defines them (PostgreSQL: parts summed in term order; SQLite:
    its own arithmetic for a part, summed exactly)."""
    def ok(p: int, d: int) -> bool:
        return eligible is None or bool(eligible[p][d])

    every = [(p, d) for p, proj in enumerate(scope) for d in range(len(proj.kinds)) if ok(p, d)]
    n = len(every)
    sum_dl = sum(int(scope[p].lengths[d]) for p, d in every)
    avgdl = sum_dl / n if n and sum_dl else 1.0
    parts: dict[tuple[int, int], list[float]] = {}
    for term in terms:
        found = _term_frequencies(scope, term, ok)
        df = float(len(found))
        idf = math.log(1.0 + (((n - df) + 0.5) / (df + 0.5)))
        w = math.log(1.0 + (float(n - len(found)) + 0.5) / (df + 0.5)) * (k1 + 1.0)
        for key, tf in found.items():
            dl = float(scope[key[0]].lengths[key[1]])
            if sqlite:
                part = (w * tf) / ((tf + k1 * (1.0 - b)) + (k1 * b / avgdl * dl))
            else:
                part = ((idf * tf) * (k1 + 1.0)) / (tf + k1 * ((1.0 - b) + ((b * dl) / avgdl)))
            parts.setdefault(key, []).append(part)
    out = {}
    for key, of_doc in parts.items():
        total = 0.0
        for part in of_doc:
            total += part
        out[key] = (math.fsum(of_doc) if sqlite else total, len(of_doc))
    return out


def test_the_ranking_is_every_documents_bm25_computed_one_by_one() -> None:
    """The ranking works over the postings only (not the scope); its list, tiers, scores
    and total are those of BM25 computed document by document, with prefix terms spanning
    several lexemes (the exact lexeme's tf first) and with eligibility masks."""
    rng = random.Random(18)
    words = ["ab", "abc", "abd", "abde", "b", "bc", "c", "cd"]
    for case in range(150):
        drawn = _draw(rng, words, 40)
        if drawn is None:
            continue
        scope, terms = drawn
        eligible = None
        if case % 3 == 0:
            eligible = [np.asarray([rng.random() < 0.7 for _ in p.kinds]) for p in scope]
        strict_at = rng.choice([1, 2, len(terms)])
        any_term = rng.random() < 0.5
        for sqlite in (False, True):
            want = _reference(scope, terms, 1.2, 0.75, eligible, sqlite)
            got = rank(scope, terms, 1.2, 0.75, strict_at, any_term, 10_000,
                       eligible=eligible, sqlite=sqlite)
            listed = {key: v for key, v in want.items() if any_term or v[1] >= strict_at}
            keys = list(zip(got.positions.tolist(), got.documents.tolist(), strict=True))
            assert set(keys) == set(listed)
            assert len(keys) == len(listed) == got.total
            for key, score, tier in zip(keys, got.scores.tolist(), got.tiers.tolist(),
                                        strict=True):
                assert (score, tier) == (listed[key][0], int(listed[key][1] >= strict_at))
