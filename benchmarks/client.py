"""A thin client over the generated stubs: projects, streamed upserts, timed searches."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

import grpc

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as search_pb2
from search_client.pb.search.v1 import project_search_pb2_grpc as search_grpc

MODES = ("fts", "vector", "hybrid")
_MODE_VALUES = {
    "fts": search_pb2.SEARCH_MODE_FTS,
    "vector": search_pb2.SEARCH_MODE_VECTOR,
    "hybrid": search_pb2.SEARCH_MODE_HYBRID,
}
_FUSION_VALUES = {
    "": search_pb2.HYBRID_FUSION_UNSPECIFIED,
    "sum": search_pb2.HYBRID_FUSION_SUM,
    "rrf": search_pb2.HYBRID_FUSION_RRF,
    "max_min": search_pb2.HYBRID_FUSION_MAX_MIN,
}
MAX_DOCS_PER_MESSAGE = 500
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]
Key = tuple[int, str, str]  # (project_id, kind, row_id)


@dataclass(frozen=True)
class Doc:
    """A document to index."""

    kind: str
    row_id: str
    title: str
    path: str
    body: str


@dataclass(frozen=True)
class UpsertSummary:
    """What one UpsertDocuments stream did."""

    documents: int
    rejected: int
    chunks_written: int
    chunks_embedded: int


@dataclass(frozen=True)
class Hit:
    """One ranked result."""

    key: Key
    score: float
    vector_score: float
    fts_score: float


@dataclass(frozen=True)
class SearchResult:
    """Every page read by one call, and the client-side seconds the call took."""

    hits: list[Hit]
    seconds: float
    ranking_is_exact: bool
    relaxed: bool
    next_page_token: str


def _to_proto(doc: Doc) -> index_pb2.Document:
    return index_pb2.Document(
        kind=doc.kind, row_id=doc.row_id, title=doc.title, path=doc.path, body=doc.body
    )


async def _messages(
    project_id: int, docs: Iterable[Doc], batch: int
) -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
    pending: list[index_pb2.Document] = []
    for doc in docs:
        pending.append(_to_proto(doc))
        if len(pending) >= batch:
            yield index_pb2.UpsertDocumentsRequest(project_id=project_id, documents=pending)
            pending = []
    if pending:
        yield index_pb2.UpsertDocumentsRequest(project_id=project_id, documents=pending)


class Client:
    """Calls the service over one channel."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.index = index_pb2_grpc.IndexServiceStub(channel)
        self.search_stub = search_grpc.ProjectSearchServiceStub(channel)

    async def create_project(self, external_id: str) -> int:
        """Create a project; its internal id."""
        reply = await self.index.CreateProject(
            index_pb2.CreateProjectRequest(external_id=external_id, name=external_id)
        )
        return int(reply.project.project_id)

    async def upsert(
        self, project_id: int, docs: Iterable[Doc], batch: int = MAX_DOCS_PER_MESSAGE
    ) -> UpsertSummary:
        """Stream documents in messages of `batch` documents; the server's summary."""
        reply = await self.index.UpsertDocuments(_messages(project_id, docs, batch))
        if reply.documents_rejected:
            rejected = index_pb2.DOCUMENT_OUTCOME_REJECTED
            first = next(r for r in reply.results if r.outcome == rejected)
            raise RuntimeError(f"upsert rejected documents: {first.field}: {first.message}")
        return UpsertSummary(
            documents=reply.documents_received,
            rejected=reply.documents_rejected,
            chunks_written=reply.chunks_written,
            chunks_embedded=reply.chunks_embedded,
        )

    async def search(
        self,
        scope: Sequence[int],
        text: str,
        mode: str,
        *,
        page_size: int = 10,
        max_pages: int = 1,
        page_token: str = "",
        deadline: float | None = 60.0,
        fusion: str = "",
        kinds: Sequence[str] = (),
        directory: str = "",
    ) -> SearchResult:
        """One SearchProjects call, every streamed page read; timed on the client.

        `fusion` ("sum", "rrf" or "max_min") picks HYBRID's fusion; empty: the server's default.
        `kinds` and `directory`: the kind and directory-prefix filters (none when empty)."""
        request = search_pb2.SearchProjectsRequest(
            scope=search_pb2.ProjectScope(project_ids=list(scope)),
            text=text,
            mode=_MODE_VALUES[mode],
            page_size=page_size,
            max_pages=max_pages,
            page_token=page_token,
            fusion=_FUSION_VALUES[fusion],
            filters=search_pb2.ProjectSearchFilters(kinds=list(kinds), directory_prefix=directory),
        )
        hits: list[Hit] = []
        exact, relaxed, token = True, False, ""
        started = time.perf_counter()
        async for reply in self.search_stub.SearchProjects(request, timeout=deadline):
            page = reply.page
            exact = exact and page.ranking_is_exact
            relaxed = relaxed or page.relaxed
            token = page.next_page_token
            hits.extend(
                Hit((r.project_id, r.kind, r.row_id), r.scores.score, r.scores.vector_score,
                    r.scores.fts_score)
                for r in page.results
            )
        seconds = time.perf_counter() - started
        return SearchResult(hits, seconds, exact, relaxed, token)


def channel(target: str) -> grpc.aio.Channel:
    """An insecure channel with large message limits."""
    return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
