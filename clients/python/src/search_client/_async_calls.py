"""Call loops for grpc.aio: deadlines, metadata, UNAVAILABLE retries and page resumption."""

# clients/python/generate_sync.py writes _sync_calls.py from this module; edit this one.

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TypeVar

import grpc

from search_client._errors import error_from_call
from search_client._options import CallSpec, RetryPolicy

__all__ = ["flatten", "server_stream", "stream_unary", "unary"]

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Page = TypeVar("Page")
Item = TypeVar("Item")


async def unary(
    method: grpc.aio.UnaryUnaryMultiCallable[Req, Resp], request: Req, spec: CallSpec,
    policy: RetryPolicy,
) -> Resp:
    """One unary call, retried on UNAVAILABLE."""
    retry = 0
    while True:
        try:
            return await method(request, timeout=spec.timeout, metadata=spec.metadata)
        except grpc.aio.AioRpcError as error:
            failure = error_from_call(error, spec.request_id)
            retry += 1
            delay = policy.next_delay(failure, retry)
            if delay is None:
                raise failure from error
        await asyncio.sleep(delay)


async def stream_unary(
    method: grpc.aio.StreamUnaryMultiCallable[Req, Resp],
    requests: Callable[[], AsyncIterator[Req]],
    replayable: bool,
    spec: CallSpec,
    policy: RetryPolicy,
) -> Resp:
    """A client-streaming call; retried on UNAVAILABLE only when `requests` can start over."""
    retry = 0
    while True:
        try:
            return await method(requests(), timeout=spec.timeout, metadata=spec.metadata)
        except grpc.aio.AioRpcError as error:
            failure = error_from_call(error, spec.request_id)
            retry += 1
            delay = policy.next_delay(failure, retry) if replayable else None
            if delay is None:
                raise failure from error
        await asyncio.sleep(delay)


async def server_stream(
    method: grpc.aio.UnaryStreamMultiCallable[Req, Resp],
    request_for: Callable[[str, int], Req],
    page_token: str,
    token_of: Callable[[Resp], str | None],
    follow: bool,
    new_spec: Callable[[], CallSpec],
    policy: RetryPolicy,
    pages: int = 0,
    new_pause: Callable[[], Callable[[Resp], float]] | None = None,
) -> AsyncIterator[Resp]:
    """Stream responses; `token_of` gives the next-page token of a page-ending response.

    `request_for(token, delivered)` builds a call's request, `delivered` counting the pages
    earlier calls of this stream returned. With `follow`, a finished call is followed by a new
    one from the last token, and an UNAVAILABLE call resumes from it. Without, a call that
    delivered nothing is retried, and one cut after some of its `pages` resumes from the last
    token for the pages still owed (never a page twice; `pages` 0: no resumption).
    `new_pause()` gives each call an observer of its responses: what it returns for the
    call's last response is how many seconds after that response a followed call starts.
    """
    token, retry, delivered = page_token, 0, 0
    while True:
        spec = new_spec()  # a fresh deadline for every call
        pause = new_pause() if new_pause is not None else None
        resume_at = 0.0
        call = method(
            request_for(token, delivered), timeout=spec.timeout, metadata=spec.metadata
        )
        received = advanced = False
        try:
            async for response in call:
                received = True
                next_token = token_of(response)
                if next_token is not None:
                    token, retry, advanced = next_token, 0, True
                    delivered += 1
                if pause is not None:
                    resume_at = time.monotonic() + pause(response)
                yield response
        except grpc.aio.AioRpcError as error:
            failure = error_from_call(error, spec.request_id)
            retry += 1
            owed = bool(token) and advanced and delivered < pages
            delay = policy.next_delay(failure, retry) if follow or not received or owed else None
            if delay is None:
                raise failure from error
            await asyncio.sleep(delay)
            continue
        finally:
            call.cancel()
        if not (follow and token and advanced):
            return
        wait = resume_at - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)


async def flatten(
    pages: AsyncIterator[Page], results: Callable[[Page], Iterable[Item]], limit: int | None
) -> AsyncIterator[Item]:
    """The results of every page in order; at most `limit` of them."""
    if limit is not None and limit <= 0:
        return
    count = 0
    async for page in pages:
        for result in results(page):
            yield result
            count += 1
            if limit is not None and count >= limit:
                return
