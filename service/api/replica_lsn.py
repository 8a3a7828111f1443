"""Read-your-writes metadata: `x-search-lsn` out of writes, `x-search-min-lsn` into searches.

Installed only when read replicas are configured (see service.store.postgres.replicas).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from service.errors import InvalidArgument
from service.store.postgres.replicas import parse_lsn, read_your_writes

LSN_HEADER = "x-search-lsn"
MIN_LSN_HEADER = "x-search-min-lsn"
WRITE_PREFIX = "/search.v1.IndexService/"
SEARCH_METHOD = "/search.v1.ProjectSearchService/SearchProjects"
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


def _min_lsn(details: grpc.HandlerCallDetails) -> str:
    metadata = getattr(details, "invocation_metadata", None) or ()
    for key, value in metadata:
        if key == MIN_LSN_HEADER and isinstance(value, str):
            return value
    return ""


def _check(min_lsn: str) -> None:
    if min_lsn and parse_lsn(min_lsn) is None:
        raise InvalidArgument.field(MIN_LSN_HEADER, "must be a PostgreSQL LSN like 0/16B3748")


class ReadYourWritesInterceptor(grpc.aio.ServerInterceptor):
    """Binds the call's minimum LSN for searches and returns the LSN of its writes."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None:
            return handler
        if method.startswith(WRITE_PREFIX) and handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                _unary(handler.unary_unary), handler.request_deserializer,
                handler.response_serializer,
            )
        if method.startswith(WRITE_PREFIX) and handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                _unary(handler.stream_unary), handler.request_deserializer,
                handler.response_serializer,
            )
        if method == SEARCH_METHOD and handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _stream(handler.unary_stream, _min_lsn(handler_call_details)),
                handler.request_deserializer, handler.response_serializer,
            )
        return handler


def _unary(behavior: Any) -> Any:
    async def wrapper(request: Any, context: Any) -> Any:
        with read_your_writes("") as box:
            reply = await behavior(request, context)
        if box.lsn:
            context.set_trailing_metadata(((LSN_HEADER, box.lsn),))
        return reply

    return wrapper


def _stream(behavior: Any, min_lsn: str) -> Any:
    async def wrapper(request: Any, context: Any) -> AsyncIterator[Any]:
        _check(min_lsn)
        with read_your_writes(min_lsn):
            async for item in behavior(request, context):
                yield item

    return wrapper
