"""Optional OpenTelemetry tracing (SEARCH_OTEL_ENABLED): a span per RPC and child spans for
embedding calls, retrieval and write statements, and provider HTTP requests.

Off by default. Off, nothing of OpenTelemetry is imported, no interceptor is installed, and
the span helpers below hand back one shared no-op context manager. On, `configure` builds a
TracerProvider (it is not made the global one: several servers may share a test process)
and `TracingInterceptor` opens the RPC span, continuing a W3C `traceparent` from the call's
metadata. Spans carry identifiers, counts, lengths and states, never credentials, metadata
values, SQL parameters or query text.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from service import context as request_context
from service.errors import ServiceError
from service.settings import Settings, SettingsError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

    from service.embeddings.base import Embedder, EmbeddingIdentity

log = logging.getLogger("search.tracing")

INSTALL_HINT = (
    "SEARCH_OTEL_ENABLED=true needs OpenTelemetry: pip install 'search-service[tracing]' "
    "(opentelemetry-api and opentelemetry-sdk)"
)
UNTRACED_PREFIX = "/grpc."  # health checks and reflection
# Server-side gRPC codes that mark the span as an error (OpenTelemetry semantic conventions).
SERVER_ERROR_CODES = frozenset(
    {"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"}
)
AttributeValue = str | bool | int | float


class SpanLike(Protocol):
    """What instrumented code may do with a span."""

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        """Set one attribute."""
        ...


class _NoSpan:
    def set_attribute(self, key: str, value: AttributeValue) -> None:
        """Nothing to record."""


_NO_SPAN = _NoSpan()
_NOTHING: contextlib.nullcontext[SpanLike] = contextlib.nullcontext(_NO_SPAN)
_tracer: Tracer | None = None
_query_index: contextvars.ContextVar[int] = contextvars.ContextVar("traced_query_index")


@dataclass(frozen=True)
class Tracing:
    """The configured tracer provider; `shutdown` flushes pending spans."""

    provider: TracerProvider

    async def shutdown(self) -> None:
        """Stop tracing and flush the exporter (off the event loop: it may block)."""
        global _tracer
        _tracer = None
        await asyncio.to_thread(self.provider.shutdown)


def enabled() -> bool:
    """True while a configured tracer is active."""
    return _tracer is not None


def configure(settings: Settings, exporter: SpanExporter | None = None) -> Tracing:
    """Build the tracer provider of `settings` (or export to `exporter`, e.g. in memory).

    Raises SettingsError when OpenTelemetry is not installed.
    """
    global _tracer
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError as error:
        raise SettingsError(INSTALL_HINT) from error
    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.otel_service_name}),
        sampler=ParentBased(TraceIdRatioBased(settings.otel_sample_ratio)),
    )
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        _add_exporter(provider, settings)
    _tracer = provider.get_tracer("search-service")
    return Tracing(provider)


def _add_exporter(provider: TracerProvider, settings: Settings) -> None:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    if settings.otel_exporter == "none":
        return
    if settings.otel_exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning(
                "SEARCH_OTEL_EXPORTER=otlp but opentelemetry-exporter-otlp-proto-http is not "
                "installed; spans go to the console"
            )
        else:
            endpoint = settings.otel_endpoint or None
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
            return
    # stdout as it is now (the exporter's default is the one of its import).
    provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stdout)))


@contextlib.contextmanager
def _started(
    name: str, attributes: Mapping[str, AttributeValue], kind: Any = None
) -> Iterator[Any]:
    """A current span; an exception sets only its type (messages may hold query text)."""
    from opentelemetry.trace import SpanKind, Status, StatusCode

    assert _tracer is not None
    with _tracer.start_as_current_span(
        name,
        kind=kind or SpanKind.INTERNAL,
        attributes=dict(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as error:
            span.set_attribute("error.type", type(error).__name__)
            if not isinstance(error, (asyncio.CancelledError, GeneratorExit)):
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            raise


def span(name: str, **attributes: AttributeValue) -> contextlib.AbstractContextManager[SpanLike]:
    """A child span of the current one; a shared no-op when tracing is off."""
    if _tracer is None:
        return _NOTHING
    return _started(name, attributes)


def db_span(system: str, operation: str, **attributes: AttributeValue) -> (
    contextlib.AbstractContextManager[SpanLike]
):
    """A span around store statements: `db.system`, the operation, no SQL parameters."""
    if _tracer is None:
        return _NOTHING
    return _started(
        f"{operation} {system}",
        {"db.system": system, "db.operation.name": operation, **attributes},
    )


def mark_query(query_index: int) -> None:
    """Tag the provider requests the current task makes with the query's index."""
    if _tracer is not None:
        _query_index.set(query_index)


def provider_request(
    provider: str, method: str
) -> contextlib.AbstractAsyncContextManager[SpanLike]:
    """A span around one provider HTTP request: provider, query index and resulting state."""
    if _tracer is None:
        return _NOTHING  # nullcontext is an async context manager too
    return _provider_request(provider, method)


@contextlib.asynccontextmanager
async def _provider_request(provider: str, method: str) -> AsyncIterator[SpanLike]:
    attributes: dict[str, AttributeValue] = {
        "search.provider": provider,
        "http.request.method": method,
    }
    index = _query_index.get(None)
    if index is not None:
        attributes["search.query_index"] = index
    with _started(f"provider {provider}", attributes, _client_kind()) as opened:
        try:
            yield opened
        except BaseException as error:
            opened.set_attribute("search.query_state", _state_of(error))
            raise
        opened.set_attribute("search.query_state", "ok")


def _client_kind() -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind.CLIENT


def _state_of(error: BaseException) -> str:
    state = getattr(error, "state", None)
    if state is not None:
        return str(getattr(state, "value", state))
    if isinstance(error, TimeoutError):
        return "timed_out"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    return "failed"


class TracedEmbedder:
    """An Embedder whose `embed` calls are spans (model, text count and total length)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner

    @property
    def identity(self) -> EmbeddingIdentity:
        """The wrapped embedder's identity."""
        return self.inner.identity

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed inside an `embed` span."""
        identity = self.inner.identity
        attributes: dict[str, AttributeValue] = {
            "search.embedding.model": identity.model,
            "search.embedding.dimensions": identity.dimensions,
            "search.embedding.texts": len(texts),
            "search.embedding.chars": sum(len(t) for t in texts),
        }
        with span("embed", **attributes):
            return await self.inner.embed(texts)

    async def warmup(self) -> None:
        """Warm up the wrapped embedder."""
        await self.inner.warmup()

    async def aclose(self) -> None:
        """Close the wrapped embedder."""
        await self.inner.aclose()


Handler = Any  # grpc.RpcMethodHandler
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]]


class TracingInterceptor(grpc.aio.ServerInterceptor):
    """A SERVER span per RPC (installed only when tracing is on).

    It runs inside the service interceptor, so the caller is authenticated and the tenant
    and request id are bound; calls refused before that (no or bad token, limits) are not
    traced, and an unauthenticated caller cannot start or continue traces.
    """

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(UNTRACED_PREFIX):
            return handler
        for kind, factory in _HANDLER_KINDS:
            behavior = getattr(handler, kind)
            if behavior is not None:
                return factory(
                    _wrap(method, behavior),
                    handler.request_deserializer,
                    handler.response_serializer,
                )
        return handler


_HANDLER_KINDS = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler),
    ("unary_stream", grpc.unary_stream_rpc_method_handler),
    ("stream_unary", grpc.stream_unary_rpc_method_handler),
    ("stream_stream", grpc.stream_stream_rpc_method_handler),
)


def _wrap(method: str, behavior: Any) -> Any:
    if inspect.isasyncgenfunction(behavior):

        async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
            with _rpc_span(method, context) as rpc:
                async for item in behavior(request, context):
                    yield item
                rpc.code = "OK"

        return streaming

    async def unary(request: Any, context: Any) -> Any:
        with _rpc_span(method, context) as rpc:
            result = await behavior(request, context)
            rpc.code = "OK"
            return result

    return unary


@dataclass
class _Rpc:
    code: str = ""


@contextlib.contextmanager
def _rpc_span(method: str, context: Any) -> Iterator[_Rpc]:
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    assert _tracer is not None
    carrier = {
        key: value
        for key, value in (context.invocation_metadata() or ())
        if key in ("traceparent", "tracestate") and isinstance(value, str)
    }
    parent = TraceContextTextMapPropagator().extract(carrier)
    service, _, name = method.lstrip("/").partition("/")
    call = request_context.current()
    rpc = _Rpc()
    with _tracer.start_as_current_span(
        method.lstrip("/"),
        context=parent,
        kind=SpanKind.SERVER,
        attributes={
            "rpc.system": "grpc",
            "rpc.service": service,
            "rpc.method": name,
            "search.tenant": call.tenant,
            "search.request_id": call.request_id,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as opened:
        try:
            yield rpc
        except BaseException as error:
            rpc.code = _code_of(error, context)
            raise
        finally:
            code = rpc.code or "UNKNOWN"
            opened.set_attribute("rpc.grpc.status_code", _code_number(code))
            opened.set_attribute("rpc.grpc.status", code)
            if code in SERVER_ERROR_CODES:
                opened.set_status(Status(StatusCode.ERROR, code))


def _code_of(error: BaseException, context: Any) -> str:
    if isinstance(error, ServiceError):
        return error.code.name
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        return "CANCELLED"
    if isinstance(error, grpc.aio.AbortError):
        code = context.code() if hasattr(context, "code") else None
        return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
    return "INTERNAL"


def _code_number(name: str) -> int:
    code = getattr(grpc.StatusCode, name, grpc.StatusCode.UNKNOWN)
    number: int = code.value[0]
    return number
