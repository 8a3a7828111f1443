"""The client's one exception tree, decoded from `google.rpc.Status` details.

    SearchError                     any failed call; `.code`, `.reason`, `.metadata`, ...
    ├── InvalidArgumentError        INVALID_ARGUMENT     `.field_violations` name bad fields
    ├── NotFoundError               NOT_FOUND
    ├── AlreadyExistsError          ALREADY_EXISTS
    ├── UnauthenticatedError        UNAUTHENTICATED
    ├── PermissionDeniedError       PERMISSION_DENIED
    ├── FailedPreconditionError     FAILED_PRECONDITION  a capability is off
    ├── ResourceExhaustedError      RESOURCE_EXHAUSTED   a limit; `.retry_delay` may be set
    ├── UnavailableError            UNAVAILABLE          retried by the client, then raised
    ├── DeadlineExceededError       DEADLINE_EXCEEDED
    ├── CallCancelledError          CANCELLED
    ├── UnimplementedError          UNIMPLEMENTED
    └── InternalError               INTERNAL, UNKNOWN, DATA_LOSS (`.request_id` finds the log)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

__all__ = [
    "AlreadyExistsError",
    "CallCancelledError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FieldViolation",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "SearchError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
]


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad request field, e.g. `field="scope.project_ids[0]"`."""

    field: str
    description: str
    reason: str = ""


class SearchError(Exception):
    """A failed call: status code, message and the decoded `ErrorInfo` / `BadRequest`."""

    default_code: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        domain: str = "",
        metadata: Mapping[str, str] | None = None,
        field_violations: Sequence[FieldViolation] = (),
        retry_delay: float | None = None,
        request_id: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: grpc.StatusCode = code or self.default_code
        self.reason = reason
        self.domain = domain
        self.metadata: Mapping[str, str] = dict(metadata or {})
        self.field_violations: tuple[FieldViolation, ...] = tuple(field_violations)
        self.retry_delay = retry_delay
        self.request_id = request_id

    @property
    def retryable(self) -> bool:
        """True when calling again later may succeed (UNAVAILABLE)."""
        return self.code is grpc.StatusCode.UNAVAILABLE

    def __str__(self) -> str:
        reason = f" {self.reason}" if self.reason else ""
        request = f" (request id {self.request_id})" if self.request_id else ""
        return f"{self.code.name}{reason}: {self.message}{request}"


class InvalidArgumentError(SearchError):
    """The request is malformed; `field_violations` names each bad field."""

    default_code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(SearchError):
    """The resource does not exist for the caller's tenant."""

    default_code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(SearchError):
    """The resource exists already (e.g. a project external id)."""

    default_code = grpc.StatusCode.ALREADY_EXISTS


class UnauthenticatedError(SearchError):
    """No valid bearer token."""

    default_code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDeniedError(SearchError):
    """The token's role may not call the method."""

    default_code = grpc.StatusCode.PERMISSION_DENIED


class FailedPreconditionError(SearchError):
    """A capability the request needs is off (see `reason`)."""

    default_code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhaustedError(SearchError):
    """A limit was reached; `metadata` names it."""

    default_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnavailableError(SearchError):
    """The service or its database is unreachable; the client retried with backoff."""

    default_code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(SearchError):
    """The call's deadline passed."""

    default_code = grpc.StatusCode.DEADLINE_EXCEEDED


class CallCancelledError(SearchError):
    """The call was cancelled."""

    default_code = grpc.StatusCode.CANCELLED


class UnimplementedError(SearchError):
    """The server does not implement the method."""

    default_code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(SearchError):
    """A server fault; quote `request_id` when reporting it."""

    default_code = grpc.StatusCode.INTERNAL


_BY_CODE: Mapping[grpc.StatusCode, type[SearchError]] = {
    cls.default_code: cls
    for cls in (
        InvalidArgumentError, NotFoundError, AlreadyExistsError, UnauthenticatedError,
        PermissionDeniedError, FailedPreconditionError, ResourceExhaustedError,
        UnavailableError, DeadlineExceededError, CallCancelledError, UnimplementedError,
        InternalError,
    )
} | {grpc.StatusCode.UNKNOWN: InternalError, grpc.StatusCode.DATA_LOSS: InternalError}


class FailedCall(Protocol):
    """What both `grpc.RpcError` (sync) and `grpc.aio.AioRpcError` offer."""

    def code(self) -> grpc.StatusCode: ...
    def details(self) -> str | None: ...
    def trailing_metadata(self) -> Any: ...


def error_from_call(call: FailedCall, request_id: str = "") -> SearchError:
    """The typed error for a failed call, with its rich status details decoded."""
    code = call.code()
    fields: dict[str, Any] = {"code": code, "request_id": request_id}
    try:
        status = rpc_status.from_call(call)
    except ValueError:  # details that contradict the status code: keep code and message only
        status = None
    violations: list[FieldViolation] = []
    for detail in status.details if status is not None else ():
        _decode_detail(detail, fields, violations)
    fields["field_violations"] = violations
    cls = _BY_CODE.get(code, SearchError)
    return cls(call.details() or code.name, **fields)


def _decode_detail(detail: Any, fields: dict[str, Any], violations: list[FieldViolation]) -> None:
    if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
        info = error_details_pb2.ErrorInfo()
        detail.Unpack(info)
        fields.update(reason=info.reason, domain=info.domain, metadata=dict(info.metadata))
        if not fields["request_id"]:
            fields["request_id"] = info.metadata.get("requestId", "")
    elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
        bad = error_details_pb2.BadRequest()
        detail.Unpack(bad)
        violations.extend(
            FieldViolation(v.field, v.description, v.reason) for v in bad.field_violations
        )
    elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
        retry = error_details_pb2.RetryInfo()
        detail.Unpack(retry)
        fields["retry_delay"] = retry.retry_delay.ToMilliseconds() / 1000
