"""Decode google.rpc.Status details from a failed call (what any client would do)."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


@dataclass(frozen=True)
class Decoded:
    """The status code and its details."""

    code: grpc.StatusCode
    message: str
    info: error_details_pb2.ErrorInfo | None
    violations: list[tuple[str, str]]
    retry_delay: float | None


def decode(error: grpc.aio.AioRpcError | grpc.RpcError) -> Decoded:
    """Unpack ErrorInfo, BadRequest and RetryInfo from the status details."""
    status = rpc_status.from_call(error)
    info = None
    violations: list[tuple[str, str]] = []
    retry = None
    for detail in status.details if status else []:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations += [(v.field, v.description) for v in bad.field_violations]
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            ri = error_details_pb2.RetryInfo()
            detail.Unpack(ri)
            retry = ri.retry_delay.ToMilliseconds() / 1000
    return Decoded(error.code(), error.details() or "", info, violations, retry)
