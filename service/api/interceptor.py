"""The one server interceptor: request context, auth, limits, error translation, access log."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing, nullcontext
from typing import Any, TypeAlias

import grpc

from service import context as request_context
from service.api.status import abort, internal_status, to_rpc_status
from service.api.stream_budget import GATED_METHODS, ResponseLimits, StreamBudget, StreamStalled
from service.api.wire import NUL_MESSAGE, Undecodable, find_nul, lenient
from service.auth import Authenticator
from service.errors import InvalidArgument, ResourceExhausted, ServiceError
from service.ratelimit import TenantRateLimiter

log = logging.getLogger("search.access")
errors_log = logging.getLogger("search.errors")

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Ctx = grpc.aio.ServicerContext[Any, Any]
_MAX_REQUEST_ID = 128
# Health checks and reflection are neither counted nor refused at the concurrency limit:
# probes must answer under load, and Health.Watch streams must not hold service slots.
UNLIMITED_PREFIX = "/grpc."
RATE_LIMITED_METHODS = frozenset(
    {
        "/search.v1.ProjectSearchService/SearchProjects",
        "/search.v1.WorkspaceSearchService/SearchWorkspace",
    }
)


def _request_descriptor(handler: Handler) -> Any:
    """The request message descriptor behind a generated `Message.FromString` deserializer."""
    owner = getattr(handler.request_deserializer, "__self__", None)
    return getattr(owner, "DESCRIPTOR", None)


class CallObserver:
    """Receives one record per finished call (metrics hook); default does nothing."""

    def observe(self, method: str, code: str, seconds: float) -> None:
        """Record a finished call."""


class ServiceInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every handler; servicers just raise `service.errors` exceptions."""

    def __init__(
        self,
        authenticator: Authenticator,
        max_concurrent_calls: int,
        observer: CallObserver | None = None,
        rate_limiter: TenantRateLimiter | None = None,
        limits: ResponseLimits | None = None,
    ) -> None:
        self._limiter = rate_limiter or TenantRateLimiter(0, 1)
        self._auth = authenticator
        self._max_calls = max_concurrent_calls
        self._active = 0
        self._observer = observer or CallObserver()
        self._budget = StreamBudget(limits or ResponseLimits())

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        parse = lenient(handler.request_deserializer, _request_descriptor(handler))
        # Responses are serialized here, so that their size is checked with ErrorInfo and
        # a logged code; gRPC then passes the bytes through.
        encode = handler.response_serializer
        passthrough = _passthrough(encode)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(method, handler.unary_unary, encode), parse, passthrough
            )
        if handler.unary_stream:
            streaming = handler.unary_stream
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(method, streaming, encode), parse, _writer(streaming, encode)
            )
        foreign = method.startswith(UNLIMITED_PREFIX)  # grpc's own servicers: health, reflection
        if handler.stream_unary:
            behavior = _strict_unary(handler.stream_unary) if foreign else handler.stream_unary
            return grpc.stream_unary_rpc_method_handler(
                self._wrap_unary(method, behavior, encode), parse, passthrough
            )
        behavior = handler.stream_stream
        if foreign and inspect.isasyncgenfunction(behavior):
            behavior = _strict_stream(behavior)
        return grpc.stream_stream_rpc_method_handler(
            self._wrap_stream(method, behavior, encode), parse, _writer(behavior, encode)
        )

    def _wrap_unary(self, method: str, behavior: Any, encode: Any) -> Any:
        async def wrapper(request: Any, context: Ctx) -> Any:
            call = _Call(self, method, context)
            async with call:
                _check_request(request)
                response = await behavior(request, context)
                return call.encode(response, encode)
            return None  # reached only when the call was aborted with a status

        return wrapper

    def _wrap_stream(self, method: str, behavior: Any, encode: Any) -> Any:
        if not inspect.isasyncgenfunction(behavior):
            # A streaming handler written with `await context.write(...)` (e.g. Health.Watch).
            return self._wrap_unary(method, behavior, None)

        async def wrapper(request: Any, context: Ctx) -> None:
            # Written here, not yielded: gRPC awaits a write until the client's flow control
            # takes it, for ever when the client never reads. The next message is produced
            # only once the previous one was taken.
            call = _Call(self, method, context)
            async with call:
                _check_request(request)
                async with aclosing(behavior(request, context)) as items:
                    while await call.send_next(items, encode):
                        pass

        return wrapper


def _passthrough(serializer: Any) -> Any:
    """The response serializer gRPC is given: messages arrive already encoded."""
    if serializer is None:
        return None

    def passthrough(message: Any) -> bytes:
        return message if isinstance(message, bytes) else bytes(serializer(message))

    return passthrough


def _writer(behavior: Any, serializer: Any) -> Any:
    """Stream handlers that call `context.write` themselves keep their own serializer."""
    return _passthrough(serializer) if inspect.isasyncgenfunction(behavior) else serializer


def _check_request(request: Any) -> None:
    """A request message that did not decode, or that carries a NUL in any string, is
    INVALID_ARGUMENT naming the field. Request streams are checked by their servicer
    (UpsertDocuments rejects such a document alone)."""
    if isinstance(request, Undecodable):
        raise request.error()
    if hasattr(request, "ListFields"):
        found = find_nul(request)
        if found:
            raise InvalidArgument.field(found, NUL_MESSAGE)


async def _decoded(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """The request stream of a servicer that knows nothing of `Undecodable`: a message that
    does not decode ends the call INVALID_ARGUMENT (instead of INTERNAL in its code)."""
    async for item in requests:
        if isinstance(item, Undecodable):
            raise item.error()
        yield item


def _strict_unary(behavior: Any) -> Any:
    async def strict(requests: AsyncIterator[Any], context: Ctx) -> Any:
        return await behavior(_decoded(requests), context)

    return strict


def _strict_stream(behavior: Any) -> Any:
    async def strict(requests: AsyncIterator[Any], context: Ctx) -> AsyncIterator[Any]:
        async for item in behavior(_decoded(requests), context):
            yield item

    return strict


_NO_PERMIT = nullcontext()


class _Call:
    """The lifetime of one call: enter binds context and checks auth/limits; exit logs."""

    def __init__(self, owner: ServiceInterceptor, method: str, context: Ctx) -> None:
        self.owner, self.method, self.context = owner, method, context
        self.code = "OK"
        self.started = time.perf_counter()
        self.token: Any = None
        self.ctx = request_context.RequestContext(request_id="-", method=method)
        self.counted = False
        self.slots = 0 if method.startswith(UNLIMITED_PREFIX) else 1
        self.stalled = 0  # bytes of a message the client did not take in time

    def encode(self, message: Any, serializer: Any) -> Any:
        """`message` serialized; RESOURCE_EXHAUSTED (RESPONSE_TOO_LARGE) over the limit."""
        if serializer is None or message is None:
            return message
        data = bytes(serializer(message))
        limit = self.owner._budget.limits.max_message_bytes
        if len(data) > limit:
            raise ResourceExhausted(
                f"the response is {len(data)} bytes, over the message limit of {limit} "
                "bytes; ask for less (a smaller page, fewer projects or ids)",
                reason="RESPONSE_TOO_LARGE",
                metadata={"limit": str(limit), "bytes": str(len(data)),
                          "setting": self.owner._budget.limits.message_setting},
            )
        return data

    async def send_next(self, items: AsyncIterator[Any], serializer: Any) -> bool:
        """Produce and send the next message; False at the end of the stream. A large-page
        stream holds one of its tenant's message permits meanwhile. Nothing here outlives
        the call: a page is referenced only until it is encoded."""
        budget = self.owner._budget
        gated = self.method in GATED_METHODS
        async with budget.message(self.ctx.tenant) if gated else _NO_PERMIT:
            try:
                data = self.encode(await anext(items), serializer)
            except StopAsyncIteration:
                return False
            try:
                await budget.write(self.ctx.tenant, self.context.write(data), len(data))
            except StreamStalled as stalled:
                self.stalled = stalled.size
                raise
            except grpc.aio.InternalError:
                # The stream ended under the write (the client went away): a cancellation.
                raise asyncio.CancelledError from None
        return True

    def _unstall(self) -> None:
        if self.stalled:
            self.owner._budget.unstall(self.ctx.tenant, self.stalled)
            self.stalled = 0

    async def __aenter__(self) -> _Call:
        metadata = {
            k: v for k, v in (self.context.invocation_metadata() or ()) if isinstance(v, str)
        }
        request_id = metadata.get("x-request-id", "")[:_MAX_REQUEST_ID] or uuid.uuid4().hex
        remaining = self.context.time_remaining()
        deadline = None if remaining is None else asyncio.get_running_loop().time() + remaining
        ctx = request_context.RequestContext(
            request_id=request_id, method=self.method, deadline=deadline
        )
        self.ctx = ctx
        self.token = request_context.bind(ctx)
        await self.context.send_initial_metadata((("x-request-id", request_id),))
        try:
            principal = self.owner._auth.authenticate(self.method, metadata)
            self.token = self._rebind(ctx, principal.tenant, principal.role)
            if self.slots:
                self.owner._budget.check(principal.tenant)
            if self.slots and self.owner._active >= self.owner._max_calls:
                raise ResourceExhausted(
                    "too many concurrent calls; retry with backoff",
                    reason="CONCURRENT_CALLS_LIMIT",
                    metadata={"limit": str(self.owner._max_calls)},
                )
            if self.method in RATE_LIMITED_METHODS:
                wait = self.owner._limiter.acquire(principal.tenant)
                if wait is not None:
                    raise ResourceExhausted(
                        "search rate limit of this tenant reached",
                        reason="TENANT_RATE_LIMITED",
                        metadata={"limit": f"{self.owner._limiter._rate:g}/s"},
                        retry_after=wait,
                    )
        except ServiceError as error:
            await self._fail(error)
        self.owner._active += self.slots
        self.counted = True
        return self

    def _rebind(self, ctx: request_context.RequestContext, tenant: str, role: str) -> Any:
        request_context.reset(self.token)
        self.ctx = request_context.RequestContext(
            request_id=ctx.request_id,
            method=ctx.method,
            tenant=tenant,
            role=role,
            deadline=ctx.deadline,
        )
        return request_context.bind(self.ctx)

    async def _fail(self, error: ServiceError) -> None:
        self.code = error.code.name
        self._finish()
        await abort(self.context, to_rpc_status(error))

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        status = None
        try:
            if exc is None or isinstance(exc, grpc.aio.AbortError):
                return False
            if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
                self.code = "CANCELLED"  # or DEADLINE_EXCEEDED: see _finish
                return False
            if isinstance(exc, ServiceError):
                self.code = exc.code.name
                status = to_rpc_status(exc)
            else:
                request_id = self.ctx.request_id
                errors_log.error(
                    "unhandled error in %s (request id %s)", self.method, request_id,
                    exc_info=exc,
                )
                self.code = "INTERNAL"
                status = internal_status(request_id)
        finally:
            # The slot is freed before the status is sent: behind a message the client never
            # took, the status waits as long as that message does.
            if self.counted:
                self.owner._active -= self.slots
                self.counted = False
                self._finish()
        try:
            if status is not None:
                await abort(self.context, status)
        except grpc.aio.InternalError:
            return True  # the stream is gone already: nobody is left to tell
        finally:
            self._unstall()
        return False

    def _deadline_passed(self) -> bool:
        deadline = self.ctx.deadline
        return deadline is not None and asyncio.get_running_loop().time() >= deadline - 0.005

    def _finish(self) -> None:
        # Past its deadline the client got DEADLINE_EXCEEDED, whether gRPC cancelled the
        # handler or the handler still returned: the log and metrics say what the caller saw.
        if self.code in ("OK", "CANCELLED") and self._deadline_passed():
            self.code = "DEADLINE_EXCEEDED"
        seconds = time.perf_counter() - self.started
        ctx = self.ctx  # not the current context: a stream may be closed from another task
        log.info(
            json.dumps(
                {
                    "event": "rpc",
                    "method": self.method,
                    "code": self.code,
                    "duration_ms": round(seconds * 1000, 2),
                    "request_id": ctx.request_id,
                    "tenant": ctx.tenant,
                },
                separators=(",", ":"),
            )
        )
        self.owner._observer.observe(self.method, self.code, seconds)
        if self.token is not None:
            request_context.reset(self.token)
            self.token = None
