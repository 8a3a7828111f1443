"""Conversions shared by every servicer: timestamps, time ranges, JSON values."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.protobuf import struct_pb2, timestamp_pb2

from search_client.pb.search.v1 import common_pb2
from service.errors import InvalidArgument
from service.timerange import TimeRange

_MIN = datetime(1, 1, 1, tzinfo=UTC)
_UNSUPPORTED = object()


def to_datetime(ts: timestamp_pb2.Timestamp, field: str) -> datetime:
    """A tz-aware UTC datetime; INVALID_ARGUMENT naming `field` when out of range."""
    try:
        return ts.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise InvalidArgument.field(field, "timestamp out of range") from None


def from_datetime(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    """A Timestamp, or None for None."""
    if value is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value)
    return ts


def to_time_range(msg: common_pb2.TimeRange, has: bool, field: str) -> TimeRange:
    """A TimeRange from an optional message field."""
    if not has:
        return TimeRange()
    start = (
        to_datetime(msg.start_time, f"{field}.start_time") if msg.HasField("start_time") else None
    )
    end = to_datetime(msg.end_time, f"{field}.end_time") if msg.HasField("end_time") else None
    return TimeRange(start, end)


def from_value(value: struct_pb2.Value) -> object:
    """A scalar from a JSON Value; structs and lists become an unsupported marker."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    return _UNSUPPORTED


def struct_to_dict(msg: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as a plain dict (numbers are floats, as JSON has them)."""
    from google.protobuf import json_format

    out: dict[str, Any] = json_format.MessageToDict(msg)
    return out


def dict_to_struct(data: Any) -> struct_pb2.Struct:
    """A plain JSON object as a Struct."""
    msg = struct_pb2.Struct()
    if data:
        msg.update(data)
    return msg
