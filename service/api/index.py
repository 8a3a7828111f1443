"""IndexService servicer: projects and documents."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError

from search_client.pb.search.v1 import index_pb2 as pb
from search_client.pb.search.v1 import index_pb2_grpc as pb_grpc
from service import context as request_context
from service.api.convert_index import (
    document_from_proto,
    identity_to_proto,
    project_to_proto,
    result_to_proto,
    status_to_proto,
)
from service.api.wire import (
    NUL_MESSAGE,
    Undecodable,
    find_invalid_utf8,
    find_nul,
    split_field,
)
from service.embeddings.base import EmbeddingIdentity
from service.errors import FieldViolation, InvalidArgument, NotFound, ServiceError
from service.indexing.documents import IncomingDocument
from service.indexing.pipeline import DocumentResult, Indexer
from service.ranking.tokens import TokenSigner, fingerprint
from service.store.base import Store, project_not_found

_EXTERNAL_ID = re.compile(r"^[A-Za-z0-9._:-]{1,200}\Z")  # \Z: "$" allows a final newline
MAX_DOCS_PER_MESSAGE = 500
MAX_KEYS = 1000
MAX_STATUS_PROJECTS = 1000
MAX_RESULTS = 10_000  # DocumentResults in one UpsertDocumentsResponse, while they fit
_REPLY_COUNTS_BYTES = 1024  # the response's counts and flags, kept out of the results' room
DOCUMENT_DESCRIPTOR = cast(Descriptor, pb.Document.DESCRIPTOR)
DOCUMENTS_FIELD = pb.UpsertDocumentsRequest.DESCRIPTOR.fields_by_name["documents"].number


class IndexServicer(pb_grpc.IndexServiceServicer):
    """Projects, document upserts and deletes, index status."""

    def __init__(
        self,
        store: Store,
        indexer: Indexer,
        signer: TokenSigner,
        identity: EmbeddingIdentity | None,
        max_message_bytes: int,
    ) -> None:
        self._store = store
        self._indexer = indexer
        self._signer = signer
        self._identity = identity
        self._max_message_bytes = max_message_bytes  # of a response

    async def CreateProject(
        self, request: pb.CreateProjectRequest, context: Any
    ) -> pb.CreateProjectResponse:
        """See the proto."""
        external_id = request.external_id or str(uuid.uuid4())
        if not _EXTERNAL_ID.match(external_id):
            raise InvalidArgument.field("external_id", "1..200 characters of [A-Za-z0-9._:-]")
        if len(request.name) > 200:
            raise InvalidArgument.field("name", "at most 200 characters")
        tenant = request_context.current().tenant
        project = await self._store.create_project(tenant, external_id, request.name)
        return pb.CreateProjectResponse(project=project_to_proto(project))

    async def ListProjects(
        self, request: pb.ListProjectsRequest, context: Any
    ) -> pb.ListProjectsResponse:
        """See the proto."""
        if not 0 <= request.page_size <= 1000:
            raise InvalidArgument.field("page_size", "must be 1..1000 (0 = 100)")
        size = request.page_size or 100
        tenant = request_context.current().tenant
        binding = fingerprint("list-projects", tenant)
        after = 0
        if request.page_token:
            state = self._signer.verify(request.page_token, "projects", binding, field="page_token")
            after = int(state.get("after", 0))
        rows = await self._store.list_projects(tenant, after, size + 1)
        token = ""
        if len(rows) > size:
            rows = rows[:size]
            token = self._signer.sign("projects", binding, {"after": rows[-1].project_id})
        return pb.ListProjectsResponse(
            projects=[project_to_proto(p) for p in rows], next_page_token=token
        )

    async def DeleteProject(
        self, request: pb.DeleteProjectRequest, context: Any
    ) -> pb.DeleteProjectResponse:
        """See the proto."""
        if request.project_id <= 0:
            raise InvalidArgument.field("project_id", "must be positive")
        tenant = request_context.current().tenant
        deleted = await self._store.delete_project(tenant, request.project_id)
        if deleted is None:
            raise project_not_found(request.project_id)
        return pb.DeleteProjectResponse(documents_deleted=deleted)

    async def UpsertDocuments(
        self, request_iterator: AsyncIterator[pb.UpsertDocumentsRequest | Undecodable], context: Any
    ) -> pb.UpsertDocumentsResponse:
        """See the proto."""
        tenant = request_context.current().tenant
        listed = _Results(self._max_message_bytes - _REPLY_COUNTS_BYTES)
        reply = listed.reply
        index = 0
        message_number = 0
        async for message in request_iterator:
            field = f"messages[{message_number}]"
            message_number += 1
            undecodable: dict[int, FieldViolation] = {}
            if isinstance(message, Undecodable):
                salvaged = _salvage(message)
                if salvaged is None:  # not even document by document: one rejection
                    reply.documents_received += 1
                    listed.add(DocumentResult(index, "", "", None, FieldViolation(
                        f"{field}.{message.field}", message.description)))
                    index += 1
                    continue
                message, undecodable = salvaged  # one bad document: the others are kept
            results = await self._upsert_message(
                tenant, message, index, field, reply, undecodable
            )
            index += len(message.documents)
            for r in results:
                listed.add(r)
        return reply

    async def _upsert_message(
        self,
        tenant: str,
        message: pb.UpsertDocumentsRequest,
        first: int,
        field: str,
        reply: pb.UpsertDocumentsResponse,
        undecodable: Mapping[int, FieldViolation] | None = None,
    ) -> list[DocumentResult]:
        """Results of one message; a document that did not decode (`undecodable`, by its
        position) keeps its own violation whatever else rejects the message."""
        bad = undecodable or {}
        results = await self._upsert_decoded(tenant, message, first, field, reply, bad)
        return [_undecoded(r, field, bad[r.index - first]) if r.index - first in bad else r
                for r in results]

    async def _upsert_decoded(
        self,
        tenant: str,
        message: pb.UpsertDocumentsRequest,
        first: int,
        field: str,
        reply: pb.UpsertDocumentsResponse,
        undecodable: Mapping[int, FieldViolation],
    ) -> list[DocumentResult]:
        count = len(message.documents)
        reply.documents_received += count
        if count > MAX_DOCS_PER_MESSAGE:
            too_many = FieldViolation(
                f"{field}.documents", f"at most {MAX_DOCS_PER_MESSAGE} per message"
            )
            return _reject_all(message, first, too_many)
        if not count:
            return []
        if message.project_id <= 0:
            return _reject_all(message, first, _no_project(field))
        incoming: list[tuple[int, IncomingDocument]] = []
        rejected: list[DocumentResult] = []
        for i, doc in enumerate(message.documents):
            if i in undecodable:  # a placeholder: never written
                rejected.append(_undecoded(DocumentResult(first + i, "", "", None), field,
                                           undecodable[i]))
                continue
            nul = find_nul(doc, f"{field}.documents[{i}].")
            if nul is not None:  # PostgreSQL cannot store it, SQLite could: neither does
                violation = FieldViolation(nul, NUL_MESSAGE)
                rejected.append(DocumentResult(first + i, doc.kind, doc.row_id, None, violation))
                continue
            try:
                incoming.append((first + i, document_from_proto(doc, f"{field}.documents[{i}]")))
            except ServiceError as error:
                violation = (
                    error.violations[0]
                    if error.violations
                    else FieldViolation(field, error.message)
                )
                rejected.append(DocumentResult(first + i, doc.kind, doc.row_id, None, violation))
        try:  # the store checks the tenant in each statement; no separate ownership query
            report = await self._indexer.upsert(tenant, message.project_id, incoming, field)
        except NotFound:
            return _reject_all(message, first, _no_project(field))
        reply.chunks_written += report.chunks_written
        reply.chunks_embedded += report.chunks_embedded
        return sorted([*report.results, *rejected], key=lambda r: r.index)

    async def DeleteDocuments(
        self, request: pb.DeleteDocumentsRequest, context: Any
    ) -> pb.DeleteDocumentsResponse:
        """See the proto."""
        if len(request.keys) > MAX_KEYS:
            raise InvalidArgument.field("keys", f"at most {MAX_KEYS} keys")
        for i, key in enumerate(request.keys):
            if not key.kind or not key.row_id:
                raise InvalidArgument.field(f"keys[{i}]", "kind and row_id are required")
        tenant = request_context.current().tenant
        if request.project_id <= 0:
            raise project_not_found(request.project_id)
        # NotFound from the store when the project is not the tenant's (checked in the delete).
        deleted = await self._store.delete_documents(
            tenant, request.project_id, [(k.kind, k.row_id) for k in request.keys]
        )
        return pb.DeleteDocumentsResponse(documents_deleted=deleted)

    async def GetIndexStatus(
        self, request: pb.GetIndexStatusRequest, context: Any
    ) -> pb.GetIndexStatusResponse:
        """See the proto."""
        ids = sorted(set(request.project_ids))
        if len(ids) > MAX_STATUS_PROJECTS:
            raise InvalidArgument.field("project_ids", f"at most {MAX_STATUS_PROJECTS} projects")
        tenant = request_context.current().tenant
        truncated, asked = False, bool(ids)
        if not asked:  # every project, up to the limit: the lowest ids, and whether there is more
            listed = await self._store.list_projects(tenant, 0, MAX_STATUS_PROJECTS + 1)
            truncated = len(listed) > MAX_STATUS_PROJECTS
            ids = [p.project_id for p in listed[:MAX_STATUS_PROJECTS]]
        # The status statements carry the tenant: another tenant's id is simply not returned.
        statuses = await self._store.index_status(tenant, ids, self._identity) if ids else []
        found = {s.project.project_id for s in statuses}
        missing = [i for i in ids if i not in found]
        if missing and asked:  # a listed project deleted meanwhile is simply gone
            raise project_not_found(missing[0])
        return pb.GetIndexStatusResponse(
            projects=[status_to_proto(s, self._identity) for s in statuses],
            configured_embedding=identity_to_proto(self._identity),
            vector_search_available=self._store.capabilities.vector_search,
            truncated=truncated,
        )


def _salvage(
    message: Undecodable,
) -> tuple[pb.UpsertDocumentsRequest, dict[int, FieldViolation]] | None:
    """An UpsertDocumentsRequest that failed to decode, document by document: the documents
    that decode, a placeholder for each one that does not (with its violation), so that one
    bad string rejects only its document, at its own index. None when the rest is broken."""
    try:
        rest, parts = split_field(message.data, DOCUMENTS_FIELD)
        salvaged = pb.UpsertDocumentsRequest.FromString(rest)
    except (ValueError, DecodeError):
        return None
    bad: dict[int, FieldViolation] = {}
    for i, part in enumerate(parts):
        try:
            salvaged.documents.append(pb.Document.FromString(part))
        except DecodeError:
            found = find_invalid_utf8(DOCUMENT_DESCRIPTOR, part, f"documents[{i}].")
            bad[i] = FieldViolation(
                found or f"documents[{i}]",
                "string is not valid UTF-8" if found else "document could not be decoded",
            )
            salvaged.documents.append(pb.Document())  # keeps the indices of the rest
    return (salvaged, bad) if bad else None


def _no_project(field: str) -> FieldViolation:
    return FieldViolation(f"{field}.project_id", "project not found")


def _reject_all(
    message: pb.UpsertDocumentsRequest, first: int, problem: FieldViolation
) -> list[DocumentResult]:
    return [
        DocumentResult(first + i, d.kind, d.row_id, None, problem)
        for i, d in enumerate(message.documents)
    ]


def _undecoded(result: DocumentResult, field: str, bad: FieldViolation) -> DocumentResult:
    """`result` rejected with the violation found while decoding its document."""
    violation = FieldViolation(f"{field}.{bad.field}", bad.description)
    return DocumentResult(result.index, "", "", None, violation)


class _Results:
    """An UpsertDocumentsResponse in the making: every document counted, and listed while the
    list holds fewer than MAX_RESULTS and fits in `room` bytes (then `results_truncated`, and
    no later document is listed: the list is always the stream's first documents)."""

    def __init__(self, room: int) -> None:
        self.reply = pb.UpsertDocumentsResponse()
        self._room = room

    def add(self, r: DocumentResult) -> None:
        _count(self.reply, r)
        if self.reply.results_truncated:
            return
        item = result_to_proto(r)
        size = item.ByteSize() + 8  # its tag and length
        if len(self.reply.results) >= MAX_RESULTS or size > self._room:
            self.reply.results_truncated = True
            return
        self.reply.results.append(item)
        self._room -= size


def _count(reply: pb.UpsertDocumentsResponse, r: DocumentResult) -> None:
    if r.outcome is None:
        reply.documents_rejected += 1
    elif r.outcome.value == "created":
        reply.documents_created += 1
    elif r.outcome.value == "updated":
        reply.documents_updated += 1
    else:
        reply.documents_unchanged += 1
