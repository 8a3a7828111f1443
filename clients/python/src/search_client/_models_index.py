"""IndexService values: projects, documents, upsert summaries and index status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from typing import Any

from search_client._enums import DocumentOutcome

__all__ = [
    "Document",
    "DocumentKey",
    "DocumentResult",
    "EmbeddingIdentity",
    "EmbeddingStatus",
    "IndexStatus",
    "Project",
    "ProjectIndexStatus",
    "ProjectList",
    "SuppliedChunk",
    "SuppliedVectors",
    "UpsertSummary",
]


@dataclass(frozen=True, slots=True)
class Project:
    """A named set of documents owned by the caller's tenant."""

    project_id: int
    external_id: str
    name: str
    create_time: datetime | None


@dataclass(frozen=True, slots=True)
class ProjectList:
    """One page of `list_projects`."""

    projects: tuple[Project, ...]
    next_page_token: str


@dataclass(frozen=True, slots=True)
class EmbeddingIdentity:
    """Model and vector length; vectors of different identities are never compared."""

    model: str
    dimensions: int


@dataclass(frozen=True, slots=True)
class SuppliedChunk:
    """One caller-computed chunk and its vector."""

    text: str
    vector: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class SuppliedVectors:
    """Chunks and vectors that replace the service's own chunking and embedding."""

    identity: EmbeddingIdentity
    chunks: tuple[SuppliedChunk, ...]


@dataclass(frozen=True, slots=True)
class Document:
    """A document to index; its identity is (project, kind, row_id)."""

    kind: str
    row_id: str
    _: KW_ONLY
    title: str = ""
    path: str = ""
    body: str = ""
    category: str = ""
    note_type: str = ""
    metadata: Mapping[str, Any] | None = None
    create_time: datetime | None = None
    update_time: datetime | None = None
    supplied_vectors: SuppliedVectors | None = None


@dataclass(frozen=True, slots=True)
class DocumentKey:
    """The identity of a document within a project."""

    kind: str
    row_id: str


@dataclass(frozen=True, slots=True)
class DocumentResult:
    """What happened to one document of an upsert stream."""

    index: int
    kind: str
    row_id: str
    outcome: DocumentOutcome
    field: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class UpsertSummary:
    """The outcome of `upsert_documents`."""

    documents_received: int
    documents_created: int
    documents_updated: int
    documents_unchanged: int
    documents_rejected: int
    chunks_written: int
    chunks_embedded: int
    results: tuple[DocumentResult, ...] = ()
    # Later documents of the stream (past 10,000, or past what fits in the response message)
    # have no entry in `results`.
    results_truncated: bool = False

    @property
    def rejected(self) -> tuple[DocumentResult, ...]:
        """The documents the service refused, with the field and reason."""
        return tuple(r for r in self.results if r.outcome is DocumentOutcome.REJECTED)


@dataclass(frozen=True, slots=True)
class EmbeddingStatus:
    """Chunk vectors of one embedding identity in one project."""

    identity: EmbeddingIdentity
    chunks_ready: int
    chunks_pending: int
    configured: bool


@dataclass(frozen=True, slots=True)
class ProjectIndexStatus:
    """Documents and vectors of one project."""

    project_id: int
    external_id: str
    documents: int
    chunks: int
    embeddings: tuple[EmbeddingStatus, ...]
    chunks_needing_embedding: int


@dataclass(frozen=True, slots=True)
class IndexStatus:
    """The result of `get_index_status`."""

    projects: tuple[ProjectIndexStatus, ...]
    configured_embedding: EmbeddingIdentity | None
    vector_search_available: bool
    # Asked for every project and the tenant has more than the 1000 reported.
    truncated: bool = False
