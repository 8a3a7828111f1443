"""IndexService: proto <-> domain."""

from __future__ import annotations

from google.protobuf import json_format

from search_client.pb.search.v1 import common_pb2
from search_client.pb.search.v1 import index_pb2 as pb
from service.api.convert_common import from_datetime, to_datetime
from service.embeddings.base import EmbeddingIdentity
from service.errors import InvalidArgument
from service.indexing.documents import IncomingDocument, SuppliedChunk
from service.indexing.pipeline import DocumentResult
from service.store.base import Outcome, ProjectRecord, ProjectStatus
from service.text import clip

OUTCOMES = {
    Outcome.CREATED: pb.DOCUMENT_OUTCOME_CREATED,
    Outcome.UPDATED: pb.DOCUMENT_OUTCOME_UPDATED,
    Outcome.UNCHANGED: pb.DOCUMENT_OUTCOME_UNCHANGED,
}


def project_to_proto(p: ProjectRecord) -> pb.Project:
    """A project."""
    return pb.Project(
        project_id=p.project_id,
        external_id=p.external_id,
        name=p.name,
        create_time=from_datetime(p.created_at),
    )


def document_from_proto(doc: pb.Document, field: str) -> IncomingDocument:
    """An incoming document (validated later, so every problem is reported per document)."""
    try:
        metadata: object = (
            json_format.MessageToDict(doc.metadata) if doc.HasField("metadata") else {}
        )
    except ValueError:  # NaN or an infinity: not JSON
        raise InvalidArgument.field(f"{field}.metadata", "numbers must be finite") from None
    identity = None
    chunks: tuple[SuppliedChunk, ...] = ()
    if doc.HasField("supplied_vectors"):
        sv = doc.supplied_vectors
        try:
            identity = EmbeddingIdentity(sv.identity.model, sv.identity.dimensions)
        except ValueError:
            raise InvalidArgument.field(
                f"{field}.supplied_vectors.identity", "model required, dimensions 1..8192"
            ) from None
        chunks = tuple(SuppliedChunk(c.text, tuple(c.vector)) for c in sv.chunks)
    return IncomingDocument(
        kind=doc.kind,
        row_id=doc.row_id,
        title=doc.title,
        path=doc.path,
        body=doc.body,
        category=doc.category,
        note_type=doc.note_type,
        metadata=metadata,
        created_at=to_datetime(doc.create_time, f"{field}.create_time")
        if doc.HasField("create_time")
        else None,
        updated_at=to_datetime(doc.update_time, f"{field}.update_time")
        if doc.HasField("update_time")
        else None,
        supplied_identity=identity,
        supplied_chunks=chunks,
    )


# A rejected document's kind and row id are echoed as sent, cut past this (longer ones are
# never valid: kinds are 1..64 characters, row ids 1..256).
_ECHO_CHARS = 256


def result_to_proto(r: DocumentResult) -> pb.DocumentResult:
    """One document's outcome."""
    if r.outcome is None:
        violation = r.violation
        return pb.DocumentResult(
            index=r.index,
            kind=clip(r.kind, _ECHO_CHARS),
            row_id=clip(r.row_id, _ECHO_CHARS),
            outcome=pb.DOCUMENT_OUTCOME_REJECTED,
            field=violation.field if violation else "",
            message=violation.description if violation else "",
        )
    return pb.DocumentResult(
        index=r.index, kind=r.kind, row_id=r.row_id, outcome=OUTCOMES[r.outcome]
    )


def identity_to_proto(identity: EmbeddingIdentity | None) -> common_pb2.EmbeddingIdentity | None:
    """An embedding identity."""
    if identity is None:
        return None
    return common_pb2.EmbeddingIdentity(model=identity.model, dimensions=identity.dimensions)


def status_to_proto(
    s: ProjectStatus, configured: EmbeddingIdentity | None
) -> pb.ProjectIndexStatus:
    """One project's index status."""
    return pb.ProjectIndexStatus(
        project_id=s.project.project_id,
        external_id=s.project.external_id,
        documents=s.documents,
        chunks=s.chunks,
        embeddings=[
            pb.EmbeddingStatus(
                identity=identity_to_proto(e.identity),
                chunks_ready=e.ready,
                chunks_pending=e.pending,
                configured=e.identity == configured,
            )
            for e in s.embeddings
        ],
        chunks_needing_embedding=s.chunks_needing_embedding,
    )
