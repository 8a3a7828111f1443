"""Reading a collection in BEIR layout: corpus.jsonl, queries.jsonl, qrels/test.tsv."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_COLLECTION = REPO.parent / "shared" / "data" / "vaswani-npl"


@dataclass(frozen=True)
class BeirDoc:
    """One corpus line."""

    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class Collection:
    """Documents, queries and relevance judgments."""

    name: str
    docs: list[BeirDoc]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def _jsonl(path: Path) -> list[dict[str, object]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t")
        for row in reader:
            if len(row) < 3 or row[0] == "query-id":
                continue
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return qrels


def _subset(docs: list[BeirDoc], relevant: set[str], count: int) -> list[BeirDoc]:
    """Up to `count` documents: the judged-relevant ones of the kept queries first, in order."""
    keep = [d for d in docs if d.doc_id in relevant][:count]
    chosen = {d.doc_id for d in keep}
    keep += [d for d in docs if d.doc_id not in chosen][: count - len(keep)]
    return keep


def load(folder: Path, *, max_docs: int = 0, max_queries: int = 0) -> Collection:
    """Read a BEIR folder (in place). `max_*` > 0 keep a prefix (smoke runs)."""
    for needed in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        if not (folder / needed).is_file():
            raise FileNotFoundError(f"{folder} is not in BEIR layout: {needed} is missing")
    docs = [
        BeirDoc(str(d["_id"]), str(d.get("title") or ""), str(d.get("text") or ""))
        for d in _jsonl(folder / "corpus.jsonl")
    ]
    qrels = _qrels(folder / "qrels" / "test.tsv")
    queries = {str(q["_id"]): str(q["text"]) for q in _jsonl(folder / "queries.jsonl")
               if str(q["_id"]) in qrels}
    if max_queries:
        queries = dict(list(queries.items())[:max_queries])
    if max_docs:
        docs = _subset(docs, {d for q in queries for d in qrels.get(q, {})}, max_docs)
    return Collection(folder.resolve().name, docs, queries, qrels)
