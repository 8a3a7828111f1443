"""The in-process BM25 ranking (service.store.lexical_index): order, ties and places."""

from __future__ import annotations

import random

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


def test_places_of_other_documents_are_their_places_in_the_whole_list() -> None:
    rng = random.Random(7)
    words = ["ab", "abc", "abd", "b", "bc", "c"]
    for _ in range(60):
        scope = [_project(rng, rng.randrange(1, 30), words) for _ in range(rng.randrange(1, 4))]
        terms = sorted({Term(rng.choice(words), rng.random() < 0.5) for _ in range(3)},
                       key=lambda t: t.lexeme.encode())
        if len({t.lexeme for t in terms}) < len(terms):
            continue
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
