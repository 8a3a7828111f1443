"""Request bytes that do not decode: kept as data so the caller gets INVALID_ARGUMENT."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from service.errors import InvalidArgument

_MAX_DEPTH = 32
NUL_MESSAGE = "must not contain U+0000 (NUL)"


@dataclass(frozen=True)
class Undecodable:
    """A request message that failed to parse; `field` names the culprit when found."""

    field: str
    description: str
    data: bytes = dataclass_field(default=b"", repr=False)  # the raw message, to salvage

    def error(self) -> InvalidArgument:
        """The INVALID_ARGUMENT to answer with."""
        return InvalidArgument.field(self.field, self.description, reason="MALFORMED_REQUEST")


def lenient(deserializer: Callable[[bytes], Any] | None, descriptor: Descriptor | None) -> Any:
    """Wrap a deserializer so failures become `Undecodable` instead of INTERNAL."""
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:
            found = find_invalid_utf8(descriptor, data) if descriptor is not None else None
            if found:
                return Undecodable(found, "string is not valid UTF-8", data)
            return Undecodable("request", "request message could not be decoded", data)

    return parse


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _skip(data: bytes, pos: int, wire: int) -> tuple[bytes | None, int]:
    if wire == 0:
        return None, _varint(data, pos)[1]
    if wire == 1:
        return None, pos + 8
    if wire == 5:
        return None, pos + 4
    if wire == 2:
        length, pos = _varint(data, pos)
        return data[pos : pos + length], pos + length
    raise ValueError("unsupported wire type")


def find_nul(message: Any, prefix: str = "", depth: int = 0) -> str | None:
    """The path of the first string (value or map key) holding U+0000, e.g.
    `filters.kinds[0]` or `documents[2].metadata.fields["a"]`; None when there is none.

    PostgreSQL cannot store NUL in text and SQLite can: both stores must answer alike, so
    no request string may carry one (rejected as INVALID_ARGUMENT naming the field)."""
    if depth > _MAX_DEPTH:
        return None
    if depth == 0 and b"\x00" not in message.SerializeToString():
        return None  # a string holding U+0000 is a 0x00 byte on the wire: none here (fast)
    for descriptor, value in message.ListFields():
        name = f"{prefix}{descriptor.name}"
        found = _nul_in_field(descriptor, value, name, depth)
        if found:
            return found
    return None


_JSON_TYPES = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")


def _nul_in_field(descriptor: FieldDescriptor, value: Any, name: str, depth: int) -> str | None:
    message_type = descriptor.message_type
    if message_type is not None and message_type.GetOptions().map_entry:
        entries = [(f"{name}[{key!r}]", key if isinstance(key, str) else "", item)
                   for key, item in value.items()]
    else:
        items = value if descriptor.is_repeated else [value]
        entries = [(f"{name}[{i}]" if descriptor.is_repeated else name, "", item)
                   for i, item in enumerate(items)]
    # JSON values (metadata): the field is named, not the path inside the value.
    opaque = message_type is not None and message_type.full_name in _JSON_TYPES
    for path, key, item in entries:
        found = path if "\x00" in key else _nul_in_item(item, path, depth)
        if found:
            return path if opaque else found
    return None


def _nul_in_item(item: Any, path: str, depth: int) -> str | None:
    if isinstance(item, str):
        return path if "\x00" in item else None
    if hasattr(item, "ListFields"):
        return find_nul(item, f"{path}.", depth + 1)
    return None


def split_field(data: bytes, number: int) -> tuple[bytes, list[bytes]]:
    """The message without field `number` (a length-delimited one), and its payloads in
    order; ValueError when the bytes are not a well-formed message."""
    rest = bytearray()
    parts: list[bytes] = []
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = _varint(data, pos)
        payload, pos = _skip(data, pos, key & 7)
        if pos > len(data):
            raise ValueError("truncated field")
        if key >> 3 == number and key & 7 == 2 and payload is not None:
            parts.append(payload)
        else:
            rest += data[start:pos]
    return bytes(rest), parts


def find_invalid_utf8(
    descriptor: Descriptor, data: bytes, prefix: str = "", depth: int = 0
) -> str | None:
    """The path of the first string field holding invalid UTF-8, e.g. `documents[3].body`."""
    if depth > _MAX_DEPTH:
        return None
    counts: dict[int, int] = {}
    pos = 0
    try:
        while pos < len(data):
            key, pos = _varint(data, pos)
            number, wire = key >> 3, key & 7
            payload, pos = _skip(data, pos, wire)
            field = descriptor.fields_by_number.get(number)
            if field is None or payload is None:
                continue
            index = counts.get(number, 0)
            counts[number] = index + 1
            name = f"{prefix}{field.name}"
            if field.is_repeated:
                name += f"[{index}]"
            found = _check(field, payload, name, depth)
            if found:
                return found
    except ValueError:
        return None
    return None


def _check(field: FieldDescriptor, payload: bytes, name: str, depth: int) -> str | None:
    if field.type == FieldDescriptor.TYPE_STRING:
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError:
            return name
        return None
    if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type is not None:
        return find_invalid_utf8(field.message_type, payload, f"{name}.", depth + 1)
    return None
