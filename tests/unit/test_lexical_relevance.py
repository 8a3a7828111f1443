"""FTS relevance on the NPL collection: relaxation must rescue all-capitals long queries."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import apsw
import pytest

from service.projects.lexical import compile_query, script_ngrams

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "vaswani-npl"

pytestmark = pytest.mark.skipif(
    not (DATA / "corpus.jsonl").exists(), reason="NPL collection not present"
)
Runs = dict[str, tuple[list[str], list[str], set[str]]]

SEARCH = "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t), rowid LIMIT 1000"


def _average_precision(ranked: list[str], relevant: set[str]) -> float:
    hits = 0
    total = 0.0
    for rank, doc in enumerate(ranked, 1):
        if doc in relevant:
            hits += 1
            total += hits / rank
    return total / len(relevant)


@pytest.fixture(scope="module")
def runs() -> Runs:
    """Per query: strict rows, relaxed rows and the relevant ids."""
    connection = apsw.Connection(":memory:")
    connection.execute(
        "CREATE VIRTUAL TABLE t USING fts5(content, ngrams, "
        "tokenize='porter unicode61 remove_diacritics 2')"
    )
    with connection, (DATA / "corpus.jsonl").open(encoding="utf-8") as corpus:
        for line in corpus:
            doc = json.loads(line)
            content = f"{doc['title']}\nnpl/{doc['_id']}.md\n{doc['text']}"
            ngrams = script_ngrams(f"{doc['title']} {doc['text']}")
            connection.execute("INSERT INTO t VALUES (?, ?)", (content, ngrams))
    relevant: defaultdict[str, set[str]] = defaultdict(set)
    for line in (DATA / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        query_id, doc_id, score = line.split("\t")
        if int(score) > 0:
            relevant[query_id].add(doc_id)
    result: Runs = {}
    for line in (DATA / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        query = json.loads(line)
        compiled = compile_query(query["text"])
        assert compiled.fts5 is not None
        assert compiled.fts5_relaxed is not None, query["text"]
        strict = [str(row[0]) for row in connection.execute(SEARCH, (compiled.fts5,))]
        relaxed = [str(row[0]) for row in connection.execute(SEARCH, (compiled.fts5_relaxed,))]
        result[query["_id"]] = (strict, relaxed, relevant[query["_id"]])
    connection.close()
    return result


def _map(runs: Runs, policy: str) -> float:
    scores = []
    for strict, relaxed, relevant in runs.values():
        if policy == "fallback":  # strict; relaxed over the whole scope when strict is empty
            ranked = strict or relaxed
        else:  # strict rows first, then the remaining relaxed rows
            ranked = strict + [doc for doc in relaxed if doc not in set(strict)]
        scores.append(_average_precision(ranked[:1000], relevant))
    return sum(scores) / len(scores)


def test_relaxation_kicks_in_for_almost_every_long_query(runs: Runs) -> None:
    assert sum(1 for strict, _, _ in runs.values() if not strict) >= 80


def test_map_with_strict_then_relaxed_fallback(runs: Runs) -> None:
    # Measured 0.2705: the 8 queries whose strict AND matches a few rows lose recall.
    assert _map(runs, "fallback") >= 0.265


def test_map_with_strict_rows_first_then_relaxed(runs: Runs) -> None:
    # Measured 0.2968 (published Terrier BM25: 0.2965).
    assert _map(runs, "tiered") >= 0.28
