"""Reads started in one event-loop turn on one client, sent together as one batch request.

The pager completes a page's stubs concurrently, one `read_together` per stub; the first read
of a turn leads: it yields once, so the reads scheduled alongside it join, then sends one
batch for all of them and hands every reader its outcome. An interrupted batch hands the
others a retryable error rather than leaving them waiting.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from service.workspace.http import HttpClient
from service.workspace.model import ProviderError, QueryState

__all__ = ["INTERRUPTED", "read_together"]

INTERRUPTED = "the batch reading it was cancelled"
T = TypeVar("T")
ReadMany = Callable[[HttpClient, Sequence[str]], Awaitable[dict[str, T | ProviderError]]]

# Reads gathering for a batch, per client and batch reader: open for the first read's turn.
_gathering: weakref.WeakKeyDictionary[
    HttpClient, dict[object, dict[str, list[asyncio.Future[object]]]]
] = weakref.WeakKeyDictionary()


async def read_together(http: HttpClient, key: str, read_many: ReadMany[T]) -> T:
    """`key`'s outcome of `read_many`, in one call with the reads of the same loop turn;
    a ProviderError outcome is raised."""
    open_now = _gathering.setdefault(http, {})
    joined = open_now.get(read_many)
    if joined is not None:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        joined.setdefault(key, []).append(future)
        return await future  # type: ignore[return-value]
    joined = open_now[read_many] = {key: []}
    outcomes: dict[str, T | ProviderError] = {}
    try:
        await asyncio.sleep(0)
        _close(http, read_many, joined)
        outcomes = await read_many(http, list(joined))
    finally:
        _close(http, read_many, joined)
        interrupted = ProviderError(QueryState.FAILED, INTERRUPTED, retryable=True)
        for item, futures in joined.items():
            outcome = outcomes.get(item, interrupted)
            for waiting in futures:
                if waiting.done():
                    continue  # its reader was cancelled
                if isinstance(outcome, ProviderError):
                    waiting.set_exception(outcome)
                else:
                    waiting.set_result(outcome)
    outcome = outcomes[key]
    if isinstance(outcome, ProviderError):
        raise outcome
    return outcome


def _close(http: HttpClient, read_many: object, joined: object) -> None:
    open_now = _gathering.get(http)
    if open_now is not None and open_now.get(read_many) is joined:
        del open_now[read_many]
