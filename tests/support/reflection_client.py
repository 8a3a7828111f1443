"""A grpcurl-like client that knows nothing but what server reflection tells it."""

from __future__ import annotations

import json
from typing import Any

import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)


class ReflectionClient:
    """list / describe / invoke with JSON in and out, like `grpcurl -plaintext`."""

    def __init__(self, target: str, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self._sync_channel = grpc.insecure_channel(target)
        self._db = ProtoReflectionDescriptorDatabase(self._sync_channel)
        self._pool = descriptor_pool.DescriptorPool(self._db)
        self._metadata = metadata

    def close(self) -> None:
        """Close the channel."""
        self._sync_channel.close()

    def list_services(self) -> list[str]:
        """Service names, like `grpcurl list`."""
        return sorted(self._db.get_services())

    def describe(self, service: str) -> ServiceDescriptor:
        """A service's descriptor, like `grpcurl describe`."""
        return self._pool.FindServiceByName(service)

    def method(self, full_method: str) -> MethodDescriptor:
        """`pkg.Service/Method` or `pkg.Service.Method`."""
        service, _, name = full_method.replace("/", ".").rpartition(".")
        return self.describe(service).methods_by_name[name]

    def invoke(
        self, full_method: str, body: dict[str, Any] | str, timeout: float = 30
    ) -> list[dict[str, Any]]:
        """Call a unary or server-streaming method with a JSON body; JSON responses back."""
        method = self.method(full_method)
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        text = body if isinstance(body, str) else json.dumps(body)
        request = json_format.Parse(text, request_cls(), descriptor_pool=self._pool)
        path = f"/{method.containing_service.full_name}/{method.name}"
        to_json = _to_json(self._pool)
        if method.server_streaming:
            call = self._sync_channel.unary_stream(
                path,
                request_serializer=request_cls.SerializeToString,
                response_deserializer=response_cls.FromString,
            )
            return [to_json(m) for m in call(request, timeout=timeout, metadata=self._metadata)]
        unary = self._sync_channel.unary_unary(
            path,
            request_serializer=request_cls.SerializeToString,
            response_deserializer=response_cls.FromString,
        )
        return [to_json(unary(request, timeout=timeout, metadata=self._metadata))]


def _to_json(pool: descriptor_pool.DescriptorPool) -> Any:
    def convert(message: Any) -> dict[str, Any]:
        out: dict[str, Any] = json_format.MessageToDict(message, descriptor_pool=pool)
        return out

    return convert
