"""Small conversions shared by every service: times, JSON objects, enums."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from google.protobuf.message import Message

from search_client._models_search import TimeRange
from search_client.pb.search.v1 import common_pb2

E = TypeVar("E", bound=enum.Enum)
D = TypeVar("D")


def time_or_none(message: Message, name: str) -> datetime | None:
    """A Timestamp field as an aware UTC datetime; None when unset."""
    if not message.HasField(name):
        return None
    stamp: timestamp_pb2.Timestamp = getattr(message, name)
    return stamp.ToDatetime(tzinfo=UTC)


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    """A datetime as a Timestamp; naive datetimes are taken as UTC."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value if value.tzinfo else value.replace(tzinfo=UTC))
    return stamp


def time_range(value: TimeRange) -> common_pb2.TimeRange:
    """A TimeRange message; open sides stay unset."""
    message = common_pb2.TimeRange()
    if value.start is not None:
        message.start_time.CopyFrom(timestamp(value.start))
    if value.end is not None:
        message.end_time.CopyFrom(timestamp(value.end))
    return message


def struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    """A JSON object as a Struct."""
    message = struct_pb2.Struct()
    message.update(dict(value))
    return message


def mapping(message: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as a plain dict (numbers come back as float)."""
    out: dict[str, Any] = json_format.MessageToDict(message)
    return out


def enum_name(prefix: str, member: enum.Enum) -> str:
    """The proto enum value name of `member`, e.g. `SEARCH_MODE_HYBRID`."""
    return prefix + member.name


def enum_member(
    cls: type[E], wrapper: EnumTypeWrapper, prefix: str, number: int, default: D
) -> E | D:
    """The Python member for a proto enum number; `default` for numbers this client predates."""
    try:
        name = wrapper.Name(number)
    except ValueError:
        return default
    member = cls.__members__.get(name.removeprefix(prefix))
    return default if member is None else member
