"""documents -> validated rows -> chunks -> vectors (reused or embedded once) -> store."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from service.embeddings.base import Embedder, EmbeddingError
from service.errors import FieldViolation
from service.indexing.chunking import chunk_markdown, document_source_text
from service.indexing.documents import IncomingDocument, check, to_input
from service.store.base import ChunkInput, DocumentInput, DocumentWrite, Outcome, Store

log = logging.getLogger("search.indexing")


@dataclass(frozen=True)
class DocumentResult:
    """The outcome of one document: an Outcome, or rejected with a violation."""

    index: int
    kind: str
    row_id: str
    outcome: Outcome | None  # None = rejected
    violation: FieldViolation | None = None


@dataclass(frozen=True)
class BatchReport:
    """What one batch did."""

    results: list[DocumentResult]
    chunks_written: int
    chunks_embedded: int


class Indexer:
    """Writes documents of one project of one tenant; idempotent and atomic per document.

    Every store call carries the tenant, which the store checks inside each statement; a
    project that is not the tenant's raises errors.NotFound before anything is written.
    """

    def __init__(self, store: Store, embedder: Embedder | None) -> None:
        self._store = store
        self._embedder = embedder

    async def upsert(
        self,
        tenant: str,
        project_id: int,
        documents: Sequence[tuple[int, IncomingDocument]],
        field: str,
    ) -> BatchReport:
        """Validate, skip unchanged, chunk, embed what is missing, write.

        errors.NotFound when the project is not the tenant's (the hash lookup, which runs
        even when every document is invalid, finds no project row).
        """
        results: dict[int, DocumentResult] = {}
        valid: list[tuple[int, DocumentInput, IncomingDocument]] = []
        for position, (index, doc) in enumerate(documents):
            problems = check(doc, f"{field}.documents[{position}]")
            if problems:
                results[index] = DocumentResult(index, doc.kind, doc.row_id, None, problems[0])
            else:
                valid.append((index, to_input(doc), doc))
        stored = await self._store.document_hashes(
            tenant, project_id, [d.key for _, d, _ in valid]
        )
        changed = []
        for index, row, incoming in valid:
            if stored.get(row.key) == row.content_hash:
                results[index] = DocumentResult(index, row.kind, row.row_id, Outcome.UNCHANGED)
            else:
                changed.append((index, row, incoming))
        writes = [DocumentWrite(row, self._chunks(row, incoming)) for _, row, incoming in changed]
        writes, embedded = await self._attach_vectors(tenant, project_id, writes)
        outcomes = (
            await self._store.write_documents(tenant, project_id, writes) if writes else []
        )
        for (index, row, _), outcome in zip(changed, outcomes, strict=True):
            results[index] = DocumentResult(index, row.kind, row.row_id, outcome)
        return BatchReport(
            results=[results[i] for i, _ in documents],
            chunks_written=sum(len(w.chunks) for w in writes),
            chunks_embedded=embedded,
        )

    @staticmethod
    def _chunks(doc: DocumentInput, raw: IncomingDocument) -> list[ChunkInput]:
        if raw.supplied_identity is not None:
            return [
                ChunkInput(i, c.text, _sha256(c.text), c.vector, raw.supplied_identity)
                for i, c in enumerate(raw.supplied_chunks)
            ]
        source = document_source_text(doc.title, doc.path, doc.body)
        return [ChunkInput(c.index, c.text, c.source_hash) for c in chunk_markdown(source)]

    async def _attach_vectors(
        self, tenant: str, project_id: int, writes: list[DocumentWrite]
    ) -> tuple[list[DocumentWrite], int]:
        """Reuse stored vectors for unchanged chunk texts; embed the rest in one call."""
        if self._embedder is None:
            return writes, 0
        identity = self._embedder.identity
        wanted = sorted({c.source_hash for w in writes for c in w.chunks if c.vector is None})
        if not wanted:
            return writes, 0
        known = await self._store.ready_vectors(tenant, project_id, wanted, identity)
        texts = {
            c.source_hash: c.text
            for w in writes
            for c in w.chunks
            if c.vector is None and c.source_hash not in known
        }
        order = sorted(texts)
        try:
            fresh = await self._embedder.embed([texts[h] for h in order]) if order else []
        except EmbeddingError:
            log.exception("embedding failed; chunks stay pending")
            fresh = []
            order = []
        vectors = {**known, **dict(zip(order, fresh, strict=True))}
        out = []
        for write in writes:
            chunks = [
                c
                if c.vector is not None or c.source_hash not in vectors
                else ChunkInput(c.index, c.text, c.source_hash, vectors[c.source_hash], identity)
                for c in write.chunks
            ]
            out.append(DocumentWrite(write.document, chunks))
        return out, len(order)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
