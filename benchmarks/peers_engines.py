"""The peer engines, in process, on the documents and chunks exported from a store.

- tantivy: one index of documents (project id as an indexed fast field; title, path and
  body in one text field), BM25 top 10 of (text query AND project id in the scope).
- LanceDB: one table of chunks with its native FTS index, a vector index and a BTree on the
  project id; FTS, vector and hybrid (RRF reranker) top 10 with the scope as a prefilter.
- numpy: exact cosine over the scope's chunk vectors, documents ranked by their best chunk.

Each search returns document keys, best first (LanceDB ranks chunks: its keys are those of
its top-10 chunks, a document once).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks.client import Key
from benchmarks.peers_export import Exported

os.environ.setdefault("LANCEDB_LOG", "error")  # lance warns of a deprecation per hybrid query

import lancedb  # reads LANCEDB_LOG when first imported
import pyarrow as pa
import tantivy
from lancedb.index import FTS, BTree, IvfHnswSq
from lancedb.query import LanceVectorQueryBuilder
from lancedb.rerankers import RRFReranker

TOP = 10
TANTIVY_ANALYZER = "en_stem"  # simple tokenizer, remove_long(40), lowercase, English stemmer
TANTIVY_HEAP = 256_000_000
LANCE_TABLE = "chunks"
LANCE_ADD_ROWS = 50_000
# Rows per IVF partition (LanceDB's own rule of thumb is about 4096 rows per partition).
LANCE_ROWS_PER_PARTITION = 4096


@dataclass(frozen=True)
class Query:
    """One search as every engine gets it: scope, text and the text's embedding."""

    scope: tuple[int, ...]
    text: str
    vector: NDArray[np.float32]


class TantivyPeer:
    """BM25 over documents, scope as a term set on the project id."""

    def __init__(self, data: Exported, directory: Path) -> None:
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("project_id", indexed=True, fast=True)
        builder.add_integer_field("doc", fast=True)
        builder.add_text_field("text", tokenizer_name=TANTIVY_ANALYZER)
        self.schema = builder.build()
        directory.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(self.schema, path=str(directory), reuse=False)
        writer = self.index.writer(heap_size=TANTIVY_HEAP, num_threads=1)
        for number, (key, text) in enumerate(zip(data.keys, data.texts, strict=True)):
            writer.add_document(tantivy.Document(project_id=key[0], doc=number, text=text))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()
        self.keys = data.keys

    def describe(self) -> dict[str, Any]:
        """Version, analyzer and query shape, for results.json."""
        return {
            "version": _version("tantivy"),
            "unit": "documents",
            "analyzer": f"{TANTIVY_ANALYZER} (simple tokenizer, remove_long 40, lowercase, "
            "English Snowball stemmer, no stop words)",
            "query": "parse_query(text, [text]) (terms OR-ed) AND term_set(project_id, scope)",
            "segments": self.searcher.num_segments,
        }

    def search(self, query: Query) -> list[Key]:
        """BM25 top 10 within the scope."""
        text, _errors = self.index.parse_query_lenient(query.text, ["text"])
        scope = tantivy.Query.term_set_query(self.schema, "project_id", list(query.scope))
        both = tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, text), (tantivy.Occur.Must, scope)]
        )
        hits = self.searcher.search(both, TOP, count=False).hits
        numbers = self.searcher.fast_field_values("doc", [address for _, address in hits])
        return [self.keys[int(n)] for n in numbers if n is not None]


class LancePeer:
    """One chunk table: FTS, vector and hybrid search with the scope as a prefilter."""

    def __init__(self, data: Exported, directory: Path) -> None:
        self.keys = data.keys
        db = lancedb.connect(str(directory))
        self.table = db.create_table(
            LANCE_TABLE, schema=_lance_schema(data.dimensions), mode="overwrite"
        )
        vectors, docs = data.vectors, np.asarray(data.chunk_doc, dtype=np.int64)
        projects = np.asarray([k[0] for k in data.keys], dtype=np.int64)[docs]
        for start in range(0, len(docs), LANCE_ADD_ROWS):
            end = start + LANCE_ADD_ROWS
            self.table.add(
                _lance_batch(
                    projects[start:end],
                    docs[start:end],
                    data.chunk_texts[start:end],
                    vectors[start:end],
                )
            )
        self.table.optimize()
        self.fts = FTS()  # defaults: simple tokenizer, lowercase, English stemmer, stop words
        self.table.create_index("text", config=self.fts)
        self.table.create_index("project_id", config=BTree())
        partitions = max(1, len(docs) // LANCE_ROWS_PER_PARTITION)
        self.vector_index = (
            f"IVF_HNSW_SQ (cosine, partitions {partitions}, m 20, ef_construction 300)"
        )
        try:
            self.table.create_index(
                "vector", config=IvfHnswSq(distance_type="cosine", num_partitions=partitions)
            )
        except (RuntimeError, ValueError) as error:  # too few rows to train: a flat scan
            self.vector_index = f"none, flat scan ({type(error).__name__}: {error})"[:300]
        self.reranker = RRFReranker()

    def describe(self) -> dict[str, Any]:
        """Version, indexes and the FTS analyzer, for results.json."""
        return {
            "version": _version("lancedb"),
            "unit": "chunks",
            "fts_index": "native (lance) FTS: simple tokenizer, max token length 40, "
            "lowercase, English stemmer, English stop words removed, ascii folding",
            "vector_index": self.vector_index,
            "scalar_index": "BTree on project_id",
            "filter": "project_id IN (scope), prefilter",
            "hybrid": "FTS + vector, RRFReranker (k = 60)",
            "rows": self.table.count_rows(),
        }

    @staticmethod
    def _where(query: Query) -> str:
        return f"project_id IN ({', '.join(str(int(p)) for p in query.scope)})"

    def _keys(self, result: pa.Table) -> list[Key]:
        docs = result.column("doc").to_pylist()
        return list(dict.fromkeys(self.keys[int(d)] for d in docs))

    def fts_search(self, query: Query) -> list[Key]:
        """Native FTS top 10 chunks within the scope."""
        result = (
            self.table.search(query.text, query_type="fts")
            .where(self._where(query), prefilter=True)
            .limit(TOP)
            .select(["doc", "_score"])
            .to_arrow()
        )
        return self._keys(result)

    def vector_search(self, query: Query) -> list[Key]:
        """Cosine top 10 chunks within the scope (through the vector index when there is one)."""
        search = self.table.search(query.vector, query_type="vector")
        assert isinstance(search, LanceVectorQueryBuilder)  # a vector query: it has a metric
        result = (
            search.distance_type("cosine")
            .where(self._where(query), prefilter=True)
            .limit(TOP)
            .select(["doc", "_distance"])
            .to_arrow()
        )
        return self._keys(result)

    def hybrid_search(self, query: Query) -> list[Key]:
        """FTS and vector fused by LanceDB's RRF reranker, top 10 chunks within the scope."""
        result = (
            self.table.search(query_type="hybrid")
            .vector(query.vector)
            .text(query.text)
            .rerank(self.reranker)
            .where(self._where(query), prefilter=True)
            .limit(TOP)
            .select(["doc"])
            .to_arrow()
        )
        return self._keys(result)


def _lance_schema(dimensions: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("project_id", pa.int64()),
            pa.field("doc", pa.int64()),
            pa.field("text", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dimensions)),
        ]
    )


def _lance_batch(
    projects: NDArray[np.int64],
    docs: NDArray[np.int64],
    texts: Sequence[str],
    vectors: NDArray[np.float32],
) -> pa.Table:
    flat = pa.array(np.ascontiguousarray(vectors).ravel(), type=pa.float32())
    return pa.table(
        {
            "project_id": pa.array(projects),
            "doc": pa.array(docs),
            "text": pa.array(texts),
            "vector": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1]),
        },
        schema=_lance_schema(vectors.shape[1]),
    )


class ExactPeer:
    """Exact cosine in numpy: per project, chunk vectors grouped by document."""

    def __init__(self, data: Exported) -> None:
        self.keys = data.keys
        vectors, docs = data.vectors, np.asarray(data.chunk_doc, dtype=np.int64)
        projects = np.asarray([k[0] for k in data.keys], dtype=np.int64)[docs]
        self.parts: dict[int, tuple[NDArray[np.float32], NDArray[np.intp], NDArray[np.int64]]]
        self.parts = {}
        # Exported chunks are ordered by project, then document: each part is contiguous.
        bounds = np.flatnonzero(np.diff(projects)) + 1
        for start, end in zip(np.r_[0, bounds], np.r_[bounds, len(projects)], strict=True):
            if end <= start:
                continue
            part_docs = docs[start:end]
            firsts = np.r_[0, np.flatnonzero(np.diff(part_docs)) + 1].astype(np.intp)
            self.parts[int(projects[start])] = (
                np.ascontiguousarray(vectors[start:end]),
                firsts,
                part_docs[firsts],
            )

    @staticmethod
    def describe() -> dict[str, Any]:
        """What it computes."""
        return {
            "version": np.__version__,
            "unit": "documents",
            "method": "float32 matrix-vector product (einsum, one thread: as fast as "
            "OpenBLAS' two threads alone, and no spinning BLAS threads to slow the other "
            "engines) per project in scope, max per document (np.maximum.reduceat), "
            "argpartition top 10",
        }

    def search(self, query: Query) -> list[Key]:
        """Top 10 documents by their best chunk's cosine similarity."""
        scores, docs = [], []
        for project_id in query.scope:
            part = self.parts.get(project_id)
            if part is None:
                continue
            matrix, firsts, part_docs = part
            scores.append(np.maximum.reduceat(np.einsum("ij,j->i", matrix, query.vector),
                                              firsts))
            docs.append(part_docs)
        if not scores:
            return []
        best, owners = np.concatenate(scores), np.concatenate(docs)
        top = min(TOP, len(best))
        picked = np.argpartition(-best, top - 1)[:top]
        picked = picked[np.argsort(-best[picked], kind="stable")]
        return [self.keys[int(owners[i])] for i in picked]


def _version(package: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"
