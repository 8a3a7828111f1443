"""Google Calendar `events.list` search over one calendar or the account's calendars."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from service.workspace.http import HttpClient
from service.workspace.model import (
    Kind,
    NativeDocument,
    ProviderPage,
    ProviderQuery,
    QueryCard,
    TimeRange,
)
from service.workspace.providers._common import (
    LegResult,
    as_dict,
    check_card,
    decode_cursor_map,
    dicts,
    documents_of,
    encode_cursor,
    gather_legs,
    join_messages,
    parse_time,
    resumable_leg,
    rfc3339,
    settle,
    sub,
    text,
)

DEFAULT_BASE_URL = "https://www.googleapis.com"
KINDS: tuple[Kind, ...] = ()
MAX_TEXT_LENGTH = 2000  # the service's cap on native query text

CARD = check_card(
    "google_calendar",
    QueryCard(
        syntax=(
            "`q` is plain text matched against title, description, location, attendee/organizer "
            "names and emails; every word must match; no operators - use one or two "
            "distinctive words."
        ),
        scope=(
            "the time range bounds the scheduled start and expands recurring events into "
            "occurrences, so an empty query with a time range lists the agenda; `project` = one "
            "calendar id (or `primary`), otherwise up to 20 calendars are searched."
        ),
        example="jane@example.com",
        avoid="`OR`, quotes or field operators; send alternatives as separate native queries.",
    ),
)

CALENDAR_LIST_PATH = "/calendar/v3/users/me/calendarList"
MAX_CALENDARS = 20
CALENDAR_CONCURRENCY = 4
MAX_EVENTS = 2500
_READABLE = frozenset({"reader", "writer", "owner"})


def calendar_list_request() -> tuple[str, dict[str, str | int]]:
    """Path and params listing the account's calendars."""
    return CALENDAR_LIST_PATH, {"maxResults": MAX_CALENDARS}


def parse_calendar_list(data: Any) -> tuple[list[str], bool]:
    """Readable calendar ids (free/busy-only ones dropped) and whether more calendars exist."""
    body = as_dict(data)
    ids = [
        cid
        for item in dicts(body.get("items"))
        if (cid := text(item.get("id"))) and text(item.get("accessRole") or "reader") in _READABLE
    ]
    return ids, bool(text(body.get("nextPageToken")))


def _time_bounds(time_range: TimeRange) -> dict[str, str]:
    bounds: dict[str, str] = {}
    if time_range.start is not None:
        start = datetime.fromtimestamp(math.floor(time_range.start.timestamp()), tz=UTC)
        bounds["timeMin"] = rfc3339(start)
    if time_range.end is not None:
        end = datetime.fromtimestamp(math.ceil(time_range.end.timestamp()), tz=UTC)
        bounds["timeMax"] = rfc3339(end)
    return bounds


def events_request(
    calendar_id: str, query: ProviderQuery, page_token: str | None
) -> tuple[str, dict[str, str | int]]:
    """Path and params of one `events.list` call."""
    params: dict[str, str | int] = {
        "maxResults": max(1, min(query.limit, MAX_EVENTS)),
        "showDeleted": "false",
    }
    if query.text.strip():
        params["q"] = query.text.strip()
    if query.time_range.is_set:
        params.update(_time_bounds(query.time_range))
        params["singleEvents"] = "true"
        params["orderBy"] = "startTime"
    if page_token:
        params["pageToken"] = page_token
    return f"/calendar/v3/calendars/{quote(calendar_id, safe='')}/events", params


def _zone(name: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(name) if name else None
    except (ZoneInfoNotFoundError, ValueError):
        return None


def event_start(start: Any, calendar_zone: str) -> datetime | None:
    """`start.dateTime` as UTC, or an all-day `start.date` at midnight in the event's zone."""
    instant = parse_time(sub(start, "dateTime"))
    if instant is not None:
        return instant
    try:
        day = date.fromisoformat(text(sub(start, "date")))
    except ValueError:
        return None
    zone = _zone(text(sub(start, "timeZone"))) or _zone(calendar_zone) or UTC
    try:
        return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)
    except OverflowError:  # 0001-01-01 east of UTC, or 9999-12-31 west of it
        return None


def _content(item: dict[str, Any]) -> str:
    attendees = [text(a.get("email")) for a in dicts(item.get("attendees"))]
    start = sub(item, "start") or {}
    end = sub(item, "end") or {}
    lines = [
        text(item.get("summary")),
        text(item.get("description")),
        f"Location: {text(item.get('location'))}" if item.get("location") else "",
        f"Start: {text(sub(start, 'dateTime')) or text(sub(start, 'date'))}",
        f"End: {text(sub(end, 'dateTime')) or text(sub(end, 'date'))}",
        "Attendees: " + ", ".join(a for a in attendees if a) if any(attendees) else "",
    ]
    return "\n".join(line for line in lines if line)


def _event(item: dict[str, Any], calendar_id: str, zone: str) -> NativeDocument:
    starts = event_start(item.get("start"), zone)
    identity = (
        text(item.get("iCalUID")) or text(item.get("recurringEventId")) or text(item.get("id"))
    )
    return NativeDocument(
        id=text(item.get("id")),
        title=text(item.get("summary")) or "(Untitled event)",
        url=text(item.get("htmlLink")),
        content=_content(item),
        kind="event",
        container=calendar_id,
        author=text(sub(item, "organizer", "email")),
        modified_at=parse_time(item.get("updated")),
        event_start_at=starts,
        dedupe_key=_occurrence(item, identity, zone),
    )


def _occurrence(item: dict[str, Any], identity: str, zone: str) -> str:
    """The event's identity in every calendar that holds it, across edits: its iCalUID, and
    for one instance of a recurring event the start the series gave it
    (`originalStartTime`), which moving the instance does not change. Not the current start:
    a rescheduled event is the same result."""
    original = item.get("originalStartTime")
    if original is None:
        return identity
    instant = event_start(original, zone)
    return f"{identity}@{instant.isoformat() if instant else text(item.get('id'))}"


def parse_events(data: Any, calendar_id: str) -> tuple[tuple[NativeDocument, ...], str | None]:
    """Events (cancelled dropped) and nextPageToken of an `events.list` answer."""
    body = as_dict(data)
    zone = text(body.get("timeZone"))
    documents = tuple(
        _event(item, calendar_id, zone)
        for item in dicts(body.get("items"))
        if text(item.get("status")) != "cancelled" and text(item.get("id"))
    )
    return documents, text(body.get("nextPageToken")) or None


def dedupe(documents: Sequence[NativeDocument]) -> tuple[NativeDocument, ...]:
    """First of each occurrence seen in several calendars (same iCalUID and start)."""
    seen: set[str] = set()
    kept: list[NativeDocument] = []
    for document in documents:
        if document.dedupe_key in seen:
            continue
        seen.add(document.dedupe_key)
        kept.append(document)
    return tuple(kept)


async def _calendar(
    http: HttpClient, calendar_id: str, query: ProviderQuery, token: str | None
) -> LegResult:
    path, params = events_request(calendar_id, query, token)
    documents, next_token = parse_events(await http.get_json(path, params=params), calendar_id)
    return LegResult(documents, next_token=next_token)


async def _plan(http: HttpClient, query: ProviderQuery) -> tuple[dict[str, str | None], str]:
    """Calendar id -> page token to search, and a note when calendars were left out."""
    if query.project.strip():
        return {query.project.strip(): query.cursor or None}, ""
    if query.cursor:
        return dict(decode_cursor_map(query.cursor)), ""
    path, params = calendar_list_request()
    # The calendar list is shared by the account's queries and kept for the memo TTL, like
    # GitLab's projects and the Atlassian sites: one list round trip, not one per query.
    ids, more = parse_calendar_list(await http.get_json_memo(path, params=params))
    note = (
        f"only the first {MAX_CALENDARS} calendars were searched; set project to search another"
        if more
        else ""
    )
    return dict.fromkeys(ids), note


async def search(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """Search one calendar (`project`) or every listed calendar, dropping duplicates."""
    tokens, note = await _plan(http, query)
    calendars = list(tokens)

    def call(calendar_id: str) -> Callable[[], Awaitable[LegResult]]:
        def read(token: str | None) -> Awaitable[LegResult]:
            return _calendar(http, calendar_id, query, token)

        return lambda: resumable_leg(read, tokens[calendar_id], query.resumed)

    outcomes = await gather_legs([call(c) for c in calendars], concurrency=CALENDAR_CONCURRENCY)
    settled = settle([(f"calendar {c}", out) for c, out in zip(calendars, outcomes, strict=True)])
    legs, errors = settled.legs, settled.messages
    following = {
        c: leg.next_token
        for c in calendars
        if (leg := legs.get(f"calendar {c}")) and leg.next_token
    }
    if query.project.strip():
        cursor = next(iter(following.values()), None)
    else:
        cursor = encode_cursor(following) if following else None
    degraded = [note, *errors]
    return ProviderPage(
        dedupe(documents_of(legs)),
        next_cursor=cursor,
        partial=any(degraded),
        message=join_messages(degraded),
        complete=settled.complete,
        retry_after=settled.retry_after,
        restarted=any(leg.restarted for leg in legs.values()),
    )
