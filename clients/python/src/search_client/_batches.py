"""Cutting a document stream into UpsertDocuments messages under the server's limits."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

from search_client._convert_index import document_to_pb
from search_client._models_index import Document
from search_client.pb.search.v1 import index_pb2 as pb

__all__ = ["MAX_BATCH_DOCUMENTS", "Batcher", "async_requests", "requests"]

MAX_BATCH_DOCUMENTS = 500  # the server's per-message limit
MAX_BATCH_BYTES = 8 * 1024 * 1024  # well under the server's 16 MiB message limit


class Batcher:
    """Collects documents until a message would exceed `batch_size` or the byte budget."""

    def __init__(self, project_id: int, batch_size: int) -> None:
        if not 1 <= batch_size <= MAX_BATCH_DOCUMENTS:
            raise ValueError(f"batch_size must be 1..{MAX_BATCH_DOCUMENTS}")
        self._project_id = project_id
        self._batch_size = batch_size
        self._pending: list[pb.Document] = []
        self._bytes = 0

    def add(self, document: Document) -> pb.UpsertDocumentsRequest | None:
        """Queue a document; returns a full message when one is ready."""
        message = document_to_pb(document)
        size = message.ByteSize()
        ready = None
        if self._pending and self._bytes + size > MAX_BATCH_BYTES:
            ready = self.flush()
        self._pending.append(message)
        self._bytes += size
        if ready is None and len(self._pending) >= self._batch_size:
            ready = self.flush()
        return ready

    def flush(self) -> pb.UpsertDocumentsRequest | None:
        """The queued documents as one message, or None when nothing is queued."""
        if not self._pending:
            return None
        request = pb.UpsertDocumentsRequest(project_id=self._project_id, documents=self._pending)
        self._pending, self._bytes = [], 0
        return request


def requests(
    project_id: int, documents: Iterable[Document], batch_size: int
) -> Iterator[pb.UpsertDocumentsRequest]:
    """UpsertDocuments messages for a synchronous document iterable."""
    batcher = Batcher(project_id, batch_size)
    for document in documents:
        ready = batcher.add(document)
        if ready is not None:
            yield ready
    last = batcher.flush()
    if last is not None:
        yield last


async def async_requests(
    project_id: int, documents: Iterable[Document] | AsyncIterable[Document], batch_size: int
) -> AsyncIterator[pb.UpsertDocumentsRequest]:
    """UpsertDocuments messages for a sync or async document iterable."""
    if not isinstance(documents, AsyncIterable):
        for request in requests(project_id, documents, batch_size):
            yield request
        return
    batcher = Batcher(project_id, batch_size)
    async for document in documents:
        ready = batcher.add(document)
        if ready is not None:
            yield ready
    last = batcher.flush()
    if last is not None:
        yield last
