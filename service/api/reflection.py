"""Server reflection that serves the protos as written: `json_name` and the proto comments.

The stubs' runtime descriptors keep no source info, so `grpcurl describe` would show no
comments, and copied back to protos they carry no `json_name`, so grpcurl would print
snake_case field names. This answers `grpc.reflection.v1alpha` from the descriptor set that
`protos/generate.py` writes beside this module (search/v1 and its imports), and from the
default pool for every other file (health, reflection, google.rpc), JSON names filled in.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from importlib import resources
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

__all__ = ["SERVICE_NAME", "DescriptorIndex", "ReflectionServicer", "enable_reflection"]

SERVICE_NAME: str = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"].full_name
DESCRIPTOR_SET = "descriptors.binpb"

FileProto = descriptor_pb2.FileDescriptorProto
FieldProto = descriptor_pb2.FieldDescriptorProto
MessageProto = descriptor_pb2.DescriptorProto
EnumProto = descriptor_pb2.EnumDescriptorProto


def json_name(field: str) -> str:
    """protoc's JSON name of a field: each `_` dropped and the character after it uppercased."""
    out: list[str] = []
    upper = False
    for char in field:
        if char == "_":
            upper = True
            continue
        out.append(char.upper() if upper else char)
        upper = False
    return "".join(out)


def _fill_json_names(fields: Iterable[FieldProto]) -> None:
    for field in fields:
        if not field.HasField("json_name"):
            field.json_name = json_name(field.name)


def _fill_messages(messages: Iterable[MessageProto]) -> None:
    for message in messages:
        _fill_json_names(message.field)
        _fill_json_names(message.extension)
        _fill_messages(message.nested_type)


def _enum_symbols(scope: str, enums: Iterable[EnumProto]) -> Iterator[str]:
    for enum in enums:
        yield scope + enum.name
        # Enum values are scoped beside their enum, as in protobuf's own symbol table.
        yield from (scope + value.name for value in enum.value)


def _message_symbols(scope: str, messages: Iterable[MessageProto]) -> Iterator[str]:
    for message in messages:
        full = scope + message.name
        yield full
        for field in (*message.field, *message.extension):
            yield f"{full}.{field.name}"
        yield from (f"{full}.{oneof.name}" for oneof in message.oneof_decl)
        yield from _enum_symbols(f"{full}.", message.enum_type)
        yield from _message_symbols(f"{full}.", message.nested_type)


def _symbols(file: FileProto) -> Iterator[str]:
    """Every fully qualified name the file defines."""
    scope = f"{file.package}." if file.package else ""
    yield from _message_symbols(scope, file.message_type)
    yield from _enum_symbols(scope, file.enum_type)
    yield from (scope + extension.name for extension in file.extension)
    for service in file.service:
        yield scope + service.name
        yield from (f"{scope}{service.name}.{method.name}" for method in service.method)


def _proto_of(descriptor: FileDescriptor) -> FileProto:
    proto = FileProto()
    descriptor.CopyToProto(proto)
    return proto


class DescriptorIndex:
    """FileDescriptorProtos by file name and by symbol: the given files first, then a pool."""

    def __init__(
        self, files: Iterable[FileProto], fallback: descriptor_pool.DescriptorPool
    ) -> None:
        self._files: dict[str, FileProto] = {}
        self._symbols: dict[str, str] = {}
        self._fallback = fallback
        for file in files:
            self._add(file)

    def _add(self, file: FileProto) -> None:
        _fill_json_names(file.extension)
        _fill_messages(file.message_type)
        self._files[file.name] = file
        for symbol in _symbols(file):
            self._symbols.setdefault(symbol, file.name)

    def file_by_name(self, name: str) -> FileProto | None:
        """The file called `name`, or None."""
        if name not in self._files:
            try:
                self._add(_proto_of(self._fallback.FindFileByName(name)))
            except KeyError:
                return None
        return self._files[name]

    def file_containing(self, symbol: str) -> FileProto | None:
        """The file defining `symbol` (a message, enum, service, method, field...), or None."""
        name = self._symbols.get(symbol)
        if name is None:
            try:
                name = self._fallback.FindFileContainingSymbol(symbol).name
            except KeyError:
                return None
        return self.file_by_name(name)

    def file_extending(self, containing_type: str, number: int) -> FileProto | None:
        """The file declaring extension `number` of `containing_type`, or None."""
        try:
            message = self._fallback.FindMessageTypeByName(containing_type)
            extension = self._fallback.FindExtensionByNumber(message, number)
            file = self._fallback.FindFileContainingSymbol(extension.full_name)
        except KeyError:
            return None
        return self.file_by_name(file.name)

    def extension_numbers(self, containing_type: str) -> list[int] | None:
        """The extension numbers of a message type; None when the type is unknown."""
        if self.file_containing(containing_type) is None:
            return None
        try:
            message = self._fallback.FindMessageTypeByName(containing_type)
        except KeyError:
            return []
        return sorted(e.number for e in self._fallback.FindAllExtensions(message))

    def with_dependencies(self, file: FileProto) -> list[bytes]:
        """`file` and every file it imports, transitively, serialized; `file` first."""
        out: list[bytes] = []
        seen: set[str] = set()
        pending = [file.name]
        while pending:
            name = pending.pop()
            found = None if name in seen else self.file_by_name(name)
            if found is None:
                continue
            seen.add(name)
            out.append(found.SerializeToString())
            pending.extend(reversed(found.dependency))
        return out


class ReflectionServicer:
    """`grpc.reflection.v1alpha.ServerReflection` answered from a DescriptorIndex."""

    def __init__(self, service_names: Iterable[str], index: DescriptorIndex) -> None:
        self._services = tuple(sorted(set(service_names)))
        self._index = index

    async def ServerReflectionInfo(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        """One response per request, in order."""
        async for request in requests:
            yield self.answer(request)

    def answer(self, request: Any) -> Any:
        """The response to one reflection request."""
        kind = request.WhichOneof("message_request")
        if kind == "file_by_filename":
            return self._files(request, self._index.file_by_name(request.file_by_filename))
        if kind == "file_containing_symbol":
            found = self._index.file_containing(request.file_containing_symbol)
            return self._files(request, found)
        if kind == "file_containing_extension":
            wanted = request.file_containing_extension
            found = self._index.file_extending(wanted.containing_type, wanted.extension_number)
            return self._files(request, found)
        if kind == "all_extension_numbers_of_type":
            return self._extension_numbers(request, request.all_extension_numbers_of_type)
        if kind == "list_services":
            services = [reflection_pb2.ServiceResponse(name=name) for name in self._services]
            return reflection_pb2.ServerReflectionResponse(
                list_services_response=reflection_pb2.ListServiceResponse(service=services),
                original_request=request,
            )
        return _error(request, grpc.StatusCode.INVALID_ARGUMENT)

    def _files(self, request: Any, file: FileProto | None) -> Any:
        if file is None:
            return _error(request, grpc.StatusCode.NOT_FOUND)
        return reflection_pb2.ServerReflectionResponse(
            file_descriptor_response=reflection_pb2.FileDescriptorResponse(
                file_descriptor_proto=self._index.with_dependencies(file)
            ),
            original_request=request,
        )

    def _extension_numbers(self, request: Any, containing_type: str) -> Any:
        numbers = self._index.extension_numbers(containing_type)
        if numbers is None:
            return _error(request, grpc.StatusCode.NOT_FOUND)
        return reflection_pb2.ServerReflectionResponse(
            all_extension_numbers_response=reflection_pb2.ExtensionNumberResponse(
                base_type_name=containing_type, extension_number=numbers
            ),
            original_request=request,
        )


def _error(request: Any, code: grpc.StatusCode) -> Any:
    number, message = code.value
    return reflection_pb2.ServerReflectionResponse(
        error_response=reflection_pb2.ErrorResponse(
            error_code=number, error_message=message
        ),
        original_request=request,
    )


@functools.cache
def _descriptor_set() -> bytes:
    resource = resources.files(__package__ or "service.api").joinpath(DESCRIPTOR_SET)
    try:
        return resource.read_bytes()
    except FileNotFoundError:
        raise RuntimeError(
            f"{DESCRIPTOR_SET} is missing from service.api: run python protos/generate.py"
        ) from None


def committed_files() -> Sequence[FileProto]:
    """The files of the committed descriptor set (search/v1 and its imports)."""
    return descriptor_pb2.FileDescriptorSet.FromString(_descriptor_set()).file


def enable_reflection(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    """Serve reflection for `service_names` and for reflection itself."""
    index = DescriptorIndex(committed_files(), descriptor_pool.Default())
    servicer = ReflectionServicer((*service_names, SERVICE_NAME), index)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
