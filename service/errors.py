"""The service's one exception tree; each class carries its gRPC code and ErrorInfo reason.

    ServiceError
    ├── InvalidArgument            INVALID_ARGUMENT     (field violations)
    │   └── InvalidPageToken       INVALID_ARGUMENT     PAGE_TOKEN_INVALID
    ├── NotFound                   NOT_FOUND
    ├── Unauthenticated            UNAUTHENTICATED
    ├── PermissionDenied           PERMISSION_DENIED
    ├── FailedPrecondition         FAILED_PRECONDITION
    │   ├── SemanticUnavailable    FAILED_PRECONDITION  SEMANTIC_SEARCH_UNAVAILABLE
    │   └── UnsupportedVectorAdapter FAILED_PRECONDITION UNSUPPORTED_MULTI_PROJECT_VECTOR_ADAPTER
    ├── ResourceExhausted          RESOURCE_EXHAUSTED   (limit in metadata)
    ├── Unavailable                UNAVAILABLE          (retryable; RetryInfo)
    ├── DeadlineExceeded           DEADLINE_EXCEEDED
    ├── Cancelled                  CANCELLED
    └── Unimplemented              UNIMPLEMENTED

`service.api.status` turns any of them into `google.rpc.Status`; anything else becomes INTERNAL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc

DOMAIN = "search.v1"


@dataclass(frozen=True)
class FieldViolation:
    """One bad field: `field` is the request path, e.g. `queries[2].text`."""

    field: str
    description: str
    reason: str = ""


class ServiceError(Exception):
    """Base of every error a caller may see; subclasses fix `code` and a default `reason`."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    reason: str = "UNKNOWN"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[FieldViolation] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})
        self.violations: tuple[FieldViolation, ...] = tuple(violations)
        self.retry_after = retry_after


class InvalidArgument(ServiceError):
    """Bad input; carries one violation per offending field."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_ARGUMENT"

    @classmethod
    def field(cls, field: str, description: str, reason: str | None = None) -> InvalidArgument:
        """One violation on one field."""
        return cls(
            f"{field}: {description}",
            reason=reason,
            violations=[FieldViolation(field, description, reason or "")],
        )


class InvalidPageToken(InvalidArgument):
    """A page token or cursor that is malformed, forged or bound to another request."""

    reason = "PAGE_TOKEN_INVALID"


class NotFound(ServiceError):
    """The resource does not exist for this tenant (never says whether it exists elsewhere)."""

    code = grpc.StatusCode.NOT_FOUND
    reason = "NOT_FOUND"


class AlreadyExists(ServiceError):
    """The resource exists already."""

    code = grpc.StatusCode.ALREADY_EXISTS
    reason = "ALREADY_EXISTS"


class Unauthenticated(ServiceError):
    """No valid bearer token."""

    code = grpc.StatusCode.UNAUTHENTICATED
    reason = "UNAUTHENTICATED"


class PermissionDenied(ServiceError):
    """The caller's role may not call the method."""

    code = grpc.StatusCode.PERMISSION_DENIED
    reason = "PERMISSION_DENIED"


class FailedPrecondition(ServiceError):
    """A capability the request needs is off."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "FAILED_PRECONDITION"


class SemanticUnavailable(FailedPrecondition):
    """Semantic modes without an embedding model or without the vector extension."""

    reason = "SEMANTIC_SEARCH_UNAVAILABLE"


class UnsupportedVectorAdapter(FailedPrecondition):
    """The configured vector adapter cannot serve multi-project search."""

    reason = "UNSUPPORTED_MULTI_PROJECT_VECTOR_ADAPTER"


class ResourceExhausted(ServiceError):
    """A limit was reached; metadata names the limit."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "RESOURCE_EXHAUSTED"


class Unavailable(ServiceError):
    """A dependency (the database) is down; retry later."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "BACKEND_UNAVAILABLE"


class DeadlineExceeded(ServiceError):
    """The call's deadline passed while the service worked on it."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    reason = "DEADLINE_EXCEEDED"


class Cancelled(ServiceError):
    """The work was cancelled."""

    code = grpc.StatusCode.CANCELLED
    reason = "CANCELLED"


class Unimplemented(ServiceError):
    """The method is part of the contract but not built yet."""

    code = grpc.StatusCode.UNIMPLEMENTED
    reason = "NOT_IMPLEMENTED"
