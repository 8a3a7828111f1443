"""IndexService: model values to requests, responses to model values."""

from __future__ import annotations

from collections.abc import Iterable

from search_client._convert_common import enum_member, struct, time_or_none, timestamp
from search_client._enums import DocumentOutcome
from search_client._models_index import (
    Document,
    DocumentKey,
    DocumentResult,
    EmbeddingIdentity,
    EmbeddingStatus,
    IndexStatus,
    Project,
    ProjectIndexStatus,
    UpsertSummary,
)
from search_client.pb.search.v1 import common_pb2
from search_client.pb.search.v1 import index_pb2 as pb

__all__ = [
    "document_to_pb",
    "index_status_from_pb",
    "keys_to_pb",
    "project_from_pb",
    "upsert_summary_from_pb",
]


def project_from_pb(message: pb.Project) -> Project:
    """A Project."""
    return Project(
        project_id=message.project_id,
        external_id=message.external_id,
        name=message.name,
        create_time=time_or_none(message, "create_time"),
    )


def document_to_pb(document: Document) -> pb.Document:
    """A Document message; unset optional parts stay unset."""
    message = pb.Document(
        kind=document.kind,
        row_id=document.row_id,
        title=document.title,
        path=document.path,
        body=document.body,
        category=document.category,
        note_type=document.note_type,
    )
    if document.metadata is not None:
        message.metadata.CopyFrom(struct(document.metadata))
    if document.create_time is not None:
        message.create_time.CopyFrom(timestamp(document.create_time))
    if document.update_time is not None:
        message.update_time.CopyFrom(timestamp(document.update_time))
    supplied = document.supplied_vectors
    if supplied is not None:
        message.supplied_vectors.identity.CopyFrom(_identity_to_pb(supplied.identity))
        for chunk in supplied.chunks:
            message.supplied_vectors.chunks.add(text=chunk.text, vector=chunk.vector)
    return message


def keys_to_pb(keys: Iterable[DocumentKey | tuple[str, str]]) -> list[pb.DocumentKey]:
    """DocumentKey messages from keys or (kind, row_id) pairs."""
    out = []
    for key in keys:
        kind, row_id = (key.kind, key.row_id) if isinstance(key, DocumentKey) else key
        out.append(pb.DocumentKey(kind=kind, row_id=row_id))
    return out


def upsert_summary_from_pb(message: pb.UpsertDocumentsResponse) -> UpsertSummary:
    """An UpsertSummary."""
    return UpsertSummary(
        documents_received=message.documents_received,
        documents_created=message.documents_created,
        documents_updated=message.documents_updated,
        documents_unchanged=message.documents_unchanged,
        documents_rejected=message.documents_rejected,
        chunks_written=message.chunks_written,
        chunks_embedded=message.chunks_embedded,
        results_truncated=message.results_truncated,
        results=tuple(
            DocumentResult(
                index=r.index,
                kind=r.kind,
                row_id=r.row_id,
                outcome=enum_member(
                    DocumentOutcome, pb.DocumentOutcome, "DOCUMENT_OUTCOME_", r.outcome,
                    DocumentOutcome.UNSPECIFIED,
                ),
                field=r.field,
                message=r.message,
            )
            for r in message.results
        ),
    )


def index_status_from_pb(message: pb.GetIndexStatusResponse) -> IndexStatus:
    """An IndexStatus."""
    configured = (
        _identity_from_pb(message.configured_embedding)
        if message.HasField("configured_embedding")
        else None
    )
    return IndexStatus(
        projects=tuple(
            ProjectIndexStatus(
                project_id=p.project_id,
                external_id=p.external_id,
                documents=p.documents,
                chunks=p.chunks,
                embeddings=tuple(
                    EmbeddingStatus(
                        identity=_identity_from_pb(e.identity),
                        chunks_ready=e.chunks_ready,
                        chunks_pending=e.chunks_pending,
                        configured=e.configured,
                    )
                    for e in p.embeddings
                ),
                chunks_needing_embedding=p.chunks_needing_embedding,
            )
            for p in message.projects
        ),
        configured_embedding=configured,
        vector_search_available=message.vector_search_available,
        truncated=message.truncated,
    )


def _identity_from_pb(message: common_pb2.EmbeddingIdentity) -> EmbeddingIdentity:
    return EmbeddingIdentity(model=message.model, dimensions=message.dimensions)


def _identity_to_pb(identity: EmbeddingIdentity) -> common_pb2.EmbeddingIdentity:
    return common_pb2.EmbeddingIdentity(model=identity.model, dimensions=identity.dimensions)

