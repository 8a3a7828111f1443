"""Helpers shared by the provider adapters: fan-out, cursors, times and query text."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any, TypeVar

from service.workspace.model import NativeDocument, ProviderError, QueryCard, QueryState

T = TypeVar("T")

UNEXPECTED_SHAPE = "provider returned an unexpected response"
BAD_CURSOR = "cursor is not valid for this provider query; restart without a cursor"

_BOOLEAN = re.compile(r"(?<![\w:-])(AND|OR|NOT)(?![\w:-])")
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)


def failed(message: str) -> ProviderError:
    """A FAILED provider error with `message`."""
    return ProviderError(QueryState.FAILED, message)


def check_card(name: str, card: QueryCard) -> QueryCard:
    """Raise unless every field of the card has text; returns the card."""
    for field_name in ("syntax", "scope", "example", "avoid"):
        if not getattr(card, field_name).strip():
            raise ValueError(f"provider {name!r} query card has an empty {field_name!r}")
    return card


# ---- shapes ---------------------------------------------------------------------------------


def as_dict(value: Any) -> dict[str, Any]:
    """The value if it is a JSON object, else FAILED (unexpected provider answer)."""
    if not isinstance(value, dict):
        raise failed(UNEXPECTED_SHAPE)
    return value


def as_list(value: Any) -> list[Any]:
    """The value if it is a JSON array, else FAILED (unexpected provider answer)."""
    if not isinstance(value, list):
        raise failed(UNEXPECTED_SHAPE)
    return value


def dicts(value: Any) -> list[dict[str, Any]]:
    """The JSON objects of an array (None = empty); other items are ignored."""
    if value is None:
        return []
    return [item for item in as_list(value) if isinstance(item, dict)]


def text(value: Any) -> str:
    """A string field, or '' when absent or not a string/number."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""


def sub(value: Any, *keys: str) -> Any:
    """Nested lookup that tolerates missing keys and non-objects."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


# ---- times ----------------------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 / RFC 3339 string as tz-aware UTC (naive = UTC); None when unusable."""
    raw = text(value).strip()
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):  # "0001-01-01T00:00:00+01:00" is before year 1 in UTC
        return None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def from_epoch(value: Any, *, millis: bool = False) -> datetime | None:
    """Unix seconds (or milliseconds), given as number or string, as UTC to the microsecond
    (decimal, not float: Gmail's 253402300799999 is 23:59:59.999 of 9999-12-31, not .998993);
    None when unusable or outside years 1-9999."""
    try:
        number = Decimal(text(value).strip())
    except InvalidOperation:
        return None
    if not number.is_finite() or number.adjusted() > 15:  # year 9999 is ~2.5e14 ms
        return None
    micros = int((number * (1_000 if millis else 1_000_000)).to_integral_value(ROUND_HALF_EVEN))
    try:
        return _EPOCH + timedelta(microseconds=micros)
    except OverflowError:  # before year 1 or after 9999
        return None


def rfc3339(when: datetime) -> str:
    """UTC RFC 3339 at whole seconds with a `Z` suffix."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- query text -----------------------------------------------------------------------------


def unquoted(query: str) -> str:
    """The query with quoted strings blanked, so operators inside phrases are ignored."""
    return _QUOTED.sub(lambda m: " " * len(m.group(0)), query)


def has_boolean_operators(query: str) -> bool:
    """True when the query uses uppercase AND/OR/NOT outside quotes."""
    return bool(_BOOLEAN.search(unquoted(query)))


def split_order_by(query: str) -> tuple[str, str]:
    """Split JQL/CQL into (filter, 'ORDER BY ...') at the last ORDER BY outside quotes."""
    matches = list(_ORDER_BY.finditer(unquoted(query)))
    if not matches:
        return query.strip(), ""
    start = matches[-1].start()
    return query[:start].strip(), query[start:].strip()


def and_clauses(query: str, clauses: Sequence[str]) -> str:
    """AND `clauses` onto a JQL/CQL query, before its ORDER BY, keeping the query's own logic."""
    if not clauses:
        return query.strip()
    filter_part, order = split_order_by(query)
    parts = [f"({filter_part})"] if filter_part else []
    joined = " AND ".join([*parts, *clauses])
    return f"{joined} {order}".strip()


# ---- cursors --------------------------------------------------------------------------------


def encode_cursor(value: Any) -> str:
    """Compact JSON continuation for fan-out providers."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def decode_cursor_map(cursor: str) -> dict[str, str]:
    """A fan-out cursor `{key: provider token}`; FAILED when it is not one."""
    try:
        value = json.loads(cursor)
    except ValueError:
        raise failed(BAD_CURSOR) from None
    if not isinstance(value, dict) or not value:
        raise failed(BAD_CURSOR)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise failed(BAD_CURSOR)
    return value


def parse_page_cursor(cursor: str | None, leg_count: int) -> tuple[int, list[int]]:
    """(page, active leg indices) of a page-numbered fan-out: `"3"` = every leg of the plan,
    `{"l":[0,2],"p":3}` = only those legs (the others ran out)."""
    if not cursor:
        return 1, list(range(leg_count))
    if cursor.isdigit() and 0 < len(cursor) <= 4:
        return int(cursor), list(range(leg_count))
    try:
        value = json.loads(cursor)
    except ValueError:
        raise failed(BAD_CURSOR) from None
    page = value.get("p") if isinstance(value, dict) else None
    legs = value.get("l") if isinstance(value, dict) else None
    if not isinstance(page, int) or page < 2 or not isinstance(legs, list) or not legs:
        raise failed(BAD_CURSOR)
    if not all(isinstance(i, int) and 0 <= i < leg_count for i in legs):
        raise failed(BAD_CURSOR)
    return page, sorted(set(legs))


def make_page_cursor(page: int, active: Sequence[int], leg_count: int) -> str | None:
    """Continuation to `page` for the legs that have one; None when no leg does."""
    if not active:
        return None
    if list(active) == list(range(leg_count)):
        return str(page)
    return encode_cursor({"p": page, "l": list(active)})


# ---- fan-out --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LegResult:
    """Documents of one fan-out leg (repo batch, calendar, site...) and its own continuation."""

    documents: tuple[NativeDocument, ...]
    next_token: str | None = None
    total: int | None = None
    incomplete: bool = False
    message: str = ""
    restarted: bool = False  # its page token was refused as expired: this is its first page


async def resumable_leg(
    read: Callable[[str | None], Awaitable[LegResult]], token: str | None, resumed: bool
) -> LegResult:
    """One leg's page from `token`; when the provider refuses a token the list resumed the
    call with (expired: a 400 the same request will always get), the leg's first page
    instead. What the list already emitted is skipped by identity, so nothing is lost or
    repeated when one leg's token expired alone (a leg that failed earlier holds an older
    token than the others)."""
    try:
        return await read(token)
    except ProviderError as error:
        if token is None or not resumed or error.state is not QueryState.FAILED or error.retryable:
            raise
    return replace(await read(None), restarted=True)


async def gather_legs(
    calls: Sequence[Callable[[], Awaitable[T]]], *, concurrency: int
) -> list[T | ProviderError]:
    """Run calls with bounded concurrency; ProviderErrors become values, cancellation spreads."""
    semaphore = asyncio.Semaphore(concurrency)

    async def run(call: Callable[[], Awaitable[T]]) -> T | ProviderError:
        async with semaphore:
            try:
                return await call()
            except ProviderError as error:
                return error

    if len(calls) == 1:  # most adapters have one leg: no tasks, no group
        return [await run(calls[0])]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(run(call)) for call in calls]
    except BaseExceptionGroup as group_error:
        # A bug in one leg cancels the rest; surface it plainly, not as a group.
        raise group_error.exceptions[0] from None
    return [task.result() for task in tasks]


def interleave(lists: Iterable[Sequence[T]]) -> list[T]:
    """Rank interleaving: every list's first item, then every second item, and so on."""
    pending = [list(items) for items in lists]
    merged: list[T] = []
    depth = max((len(items) for items in pending), default=0)
    for rank in range(depth):
        merged.extend(items[rank] for items in pending if rank < len(items))
    return merged


def join_messages(messages: Iterable[str]) -> str:
    """Join sentences, dropping blanks and repeats, keeping order."""
    seen: list[str] = []
    for message in messages:
        cleaned = message.strip()
        if cleaned and cleaned not in seen:
            seen.append(cleaned)
    return " ".join(m if m.endswith((".", "!", "?")) else m + "." for m in seen)


@dataclass(frozen=True)
class Settled:
    """The legs that answered, a message per failed leg, and whether any leg failed."""

    legs: dict[str, LegResult]
    messages: list[str]
    complete: bool  # False: a leg failed and the page must be read again to retry it
    retry_after: float | None  # the longest wait a rate-limited leg asked for


def settle(outcomes: Sequence[tuple[str, LegResult | ProviderError]]) -> Settled:
    """Keep successful legs; a failing leg becomes a message; all failing raises the first.

    Keys are the legs' human labels ("calendar team@example.com", "code search"). A failed
    leg leaves the page incomplete (read again on the next page) unless its error is final.
    """
    succeeded = {key: out for key, out in outcomes if isinstance(out, LegResult)}
    errors = [(key, out) for key, out in outcomes if isinstance(out, ProviderError)]
    if errors and not succeeded:
        raise _worst(errors)
    messages = [f"{key} failed: {error.message}" for key, error in errors]
    waits = [error.retry_after for _, error in errors if error.retry_after is not None]
    complete = not any(error.retryable for _, error in errors)
    return Settled(succeeded, messages, complete, max(waits) if waits else None)


def _worst(errors: Sequence[tuple[str, ProviderError]]) -> ProviderError:
    """The error to report when every leg failed: a retryable one (the longest wait) keeps
    the list alive for the next page; only when every leg failed for good is it final."""
    retryable = [error for _, error in errors if error.retryable]
    if retryable:
        return max(retryable, key=lambda e: e.retry_after or 0.0)
    return errors[0][1]


def documents_of(legs: Mapping[str, LegResult]) -> tuple[NativeDocument, ...]:
    """Interleave the legs' documents in leg order."""
    return tuple(interleave(leg.documents for leg in legs.values()))
