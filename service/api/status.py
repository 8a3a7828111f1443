"""The one translator from service errors to `google.rpc.Status` with rich details."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from service.errors import DOMAIN, ServiceError
from service.text import clip

INTERNAL_MESSAGE = "internal error; the request id identifies it in the server logs"

# What one error may put in the call's trailers. gRPC clients refuse trailers over 16 KiB and,
# between 8 and 16 KiB (`grpc.max_metadata_size`, a soft limit), refuse some at random: the
# caller then sees RESOURCE_EXHAUSTED "Stream removed" instead of the error. The message goes
# out twice (`grpc-message`, percent-encoded, at most 3 bytes per byte, and inside the Status,
# base64 in `grpc-status-details-bin`, 4 per 3), so with these bounds an error's trailers stay
# under 6 KiB however many fields a request got wrong.
MAX_MESSAGE_BYTES = 512  # UTF-8
MAX_STATUS_BYTES = 3 * 1024  # the serialized Status: message, ErrorInfo, BadRequest, RetryInfo
MAX_FIELD_CHARS = 200  # a violation's field path
MAX_TEXT_CHARS = 400  # a violation's description, an ErrorInfo metadata value


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def to_rpc_status(error: ServiceError) -> status_pb2.Status:
    """ErrorInfo always; BadRequest for field violations; RetryInfo when waiting helps.

    Bounded (see MAX_STATUS_BYTES): the first violations that fit, in the order they were
    found. With two or more, ErrorInfo's `violationCount` counts them all; when some are
    left out, the message says so too."""
    code_value: int = error.code.value[0]
    metadata = {key: clip(value, MAX_TEXT_CHARS) for key, value in error.metadata.items()}
    total = len(error.violations)
    if total > 1:
        metadata["violationCount"] = str(total)
    status = status_pb2.Status(code=code_value, message=_cut_bytes(error.message))
    status.details.append(
        _pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN, metadata=metadata))
    )
    retry = None
    if error.retry_after is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(int(error.retry_after * 1000))
        retry = _pack(error_details_pb2.RetryInfo(retry_delay=delay))
    if error.violations:
        bad = _bad_request(error, status.ByteSize() + (retry.ByteSize() + 4 if retry else 0))
        status.details.append(_pack(bad))
        shown = len(bad.field_violations)
        if shown < total:
            status.message = _cut_bytes(
                error.message, suffix=f" ({shown} of {total} field violations in BadRequest)"
            )
    if retry is not None:
        status.details.append(retry)
    return status


def _bad_request(error: ServiceError, used: int) -> error_details_pb2.BadRequest:
    """The error's violations, cut to size, as many as fit beside `used` bytes (one at least)."""
    bad = error_details_pb2.BadRequest()
    room = MAX_STATUS_BYTES - used - 64  # the Any wrapper, and the message's suffix
    for violation in error.violations:
        item = error_details_pb2.BadRequest.FieldViolation(
            field=clip(violation.field, MAX_FIELD_CHARS),
            description=clip(violation.description, MAX_TEXT_CHARS),
            reason=clip(violation.reason, MAX_FIELD_CHARS),
        )
        cost = item.ByteSize() + 4  # the field's tag and length
        if bad.field_violations and cost > room:
            break
        bad.field_violations.append(item)
        room -= cost
    return bad


def _cut_bytes(text: str, suffix: str = "") -> str:
    """`text` + `suffix` within MAX_MESSAGE_BYTES of UTF-8 (`text` cut, with "...")."""
    encoded = text.encode()
    room = MAX_MESSAGE_BYTES - len(suffix.encode())
    if len(encoded) <= room:
        return text + suffix
    return encoded[: room - 3].decode(errors="ignore") + "..." + suffix


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
