"""The one translator from service errors to `google.rpc.Status` with rich details."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from service.errors import DOMAIN, ServiceError

INTERNAL_MESSAGE = "internal error; the request id identifies it in the server logs"


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def to_rpc_status(error: ServiceError) -> status_pb2.Status:
    """ErrorInfo always; BadRequest for field violations; RetryInfo when waiting helps."""
    code_value: int = error.code.value[0]
    details = [
        _pack(
            error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN, metadata=error.metadata)
        )
    ]
    if error.violations:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.field, description=v.description, reason=v.reason
                )
                for v in error.violations
            ]
        )
        details.append(_pack(bad))
    if error.retry_after is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(int(error.retry_after * 1000))
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    return status_pb2.Status(code=code_value, message=error.message, details=details)


def internal_status(request_id: str) -> status_pb2.Status:
    """A generic INTERNAL that reveals nothing but the request id."""
    info = error_details_pb2.ErrorInfo(
        reason="INTERNAL", domain=DOMAIN, metadata={"requestId": request_id}
    )
    return status_pb2.Status(
        code=code_pb2.INTERNAL, message=INTERNAL_MESSAGE, details=[_pack(info)]
    )


async def abort(
    context: grpc.aio.ServicerContext[object, object], status: status_pb2.Status
) -> None:
    """End the call with `status` (raises grpc.aio.AbortError)."""
    rich = rpc_status.to_status(status)
    await context.abort(rich.code, rich.details, rich.trailing_metadata)
