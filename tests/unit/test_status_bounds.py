"""The error translator keeps every error within what gRPC clients accept in trailers."""

from __future__ import annotations

import base64
from urllib.parse import quote

from google.rpc import error_details_pb2

from service.api.status import MAX_MESSAGE_BYTES, MAX_STATUS_BYTES, to_rpc_status
from service.errors import FieldViolation, InvalidArgument, ResourceExhausted


def _violations(status_details: object) -> list[error_details_pb2.BadRequest.FieldViolation]:
    found = []
    for detail in status_details:  # type: ignore[attr-defined]
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            found += list(bad.field_violations)
    return found


def test_a_small_error_goes_out_whole() -> None:
    error = InvalidArgument("a: wrong; b: wrong", violations=[
        FieldViolation("a", "wrong"), FieldViolation("b", "wrong", "WHY")])
    status = to_rpc_status(error)
    assert status.message == "a: wrong; b: wrong"
    assert [(v.field, v.description, v.reason) for v in _violations(status.details)] == [
        ("a", "wrong", ""), ("b", "wrong", "WHY")]


def test_thousands_of_long_non_ascii_violations_stay_within_the_bounds() -> None:
    violations = [FieldViolation(f"queries[{i}].text" + "\u00e9" * 5000, "\u6f22" * 5000,
                                 "R" * 5000) for i in range(2000)]
    message = "; ".join(f"{v.field}: {v.description}" for v in violations)
    status = to_rpc_status(InvalidArgument(message, violations=violations))
    assert status.ByteSize() <= MAX_STATUS_BYTES
    assert len(status.message.encode()) <= MAX_MESSAGE_BYTES
    # What goes on the wire: grpc-message percent-encoded, the Status in base64.
    wire = len(quote(status.message.encode())) + len(base64.b64encode(status.SerializeToString()))
    assert wire < 6 * 1024
    shown = _violations(status.details)
    assert shown
    assert shown[0].field.startswith("queries[0].text")
    assert [v.field.split("]")[0] for v in shown] == [f"queries[{i}" for i in range(len(shown))]
    assert status.message.endswith(f"({len(shown)} of 2000 field violations in BadRequest)")


def test_metadata_values_and_long_messages_are_cut() -> None:
    error = ResourceExhausted("x" * 10_000, metadata={"limit": "9" * 10_000})
    status = to_rpc_status(error)
    assert len(status.message.encode()) <= MAX_MESSAGE_BYTES
    assert status.message.endswith("...")
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    assert len(info.metadata["limit"]) <= 400
    assert info.metadata["limit"].endswith("...")


def test_retry_info_follows_a_full_bad_request_within_the_bound() -> None:
    violations = [FieldViolation(f"f{i}", "d" * 300) for i in range(100)]
    status = to_rpc_status(InvalidArgument("many", violations=violations, retry_after=1.5))
    assert status.ByteSize() <= MAX_STATUS_BYTES
    kinds = [detail.type_url.rsplit(".", 1)[-1] for detail in status.details]
    assert kinds == ["ErrorInfo", "BadRequest", "RetryInfo"]
