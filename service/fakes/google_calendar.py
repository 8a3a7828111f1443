"""Fake Google Calendar v3: `calendarList.list` and `events.list`."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from service.fakes.base import (
    FakeProvider,
    google_invalid_value,
    matches_all,
    offset_token,
    page_slice,
    parse_when,
    token_offset,
    words,
)
from service.fakes.server import Request, Response


def _start(event: dict[str, Any]) -> str:
    start = event["start"]
    return str(start.get("dateTime") or start["date"] + "T00:00:00Z")


def _end(event: dict[str, Any]) -> str:
    end = event["end"]
    return str(end.get("dateTime") or end["date"] + "T00:00:00Z")


class FakeCalendar(FakeProvider):
    """Calendars holding events; cancelled events are returned like Google's exceptions."""

    name = "google_calendar"

    def __init__(self) -> None:
        super().__init__()
        self.route("GET", r"/calendar/v3/users/me/calendarList", self._calendars)
        self.route("GET", r"/calendar/v3/calendars/([^/]+)/events", self._events)
        self.reset()

    def reset(self) -> None:
        """No calendars."""
        super().reset()
        self.calendars: dict[str, dict[str, Any]] = {}
        self._epochs: dict[str, int] = {}  # calendars whose page tokens expired on their own

    def expire_calendar_tokens(self, calendar_id: str) -> None:
        """Expire the event page tokens of one calendar only (tokens expire by age: the one
        a leg kept from an earlier page goes first)."""
        self._epochs[calendar_id] = self._epochs.get(calendar_id, 0) + 1

    def unauthorized(self) -> Response:
        """Google's 401."""
        return Response.json({"error": {"code": 401, "status": "UNAUTHENTICATED"}}, 401)

    def add_calendar(
        self, calendar_id: str, *, time_zone: str = "UTC", access_role: str = "owner"
    ) -> None:
        """A calendar the account can see."""
        self.calendars[calendar_id] = {
            "id": calendar_id,
            "summary": calendar_id,
            "timeZone": time_zone,
            "accessRole": access_role,
            "_events": [],
        }

    def add_event(
        self,
        calendar_id: str,
        event_id: str,
        summary: str,
        *,
        start: str,
        end: str,
        all_day: bool = False,
        status: str = "confirmed",
        ical_uid: str = "",
        attendees: tuple[str, ...] = (),
        updated: str = "2024-01-01T00:00:00Z",
        time_zone: str = "",
    ) -> None:
        """An event; `start`/`end` are RFC 3339 instants, or dates when `all_day`;
        `time_zone` is sent as `start.timeZone` and `end.timeZone` when given (Google's
        IANA name, which the service may not know)."""
        key = "date" if all_day else "dateTime"
        zone = {"timeZone": time_zone} if time_zone else {}
        event: dict[str, Any] = {
            "kind": "calendar#event",
            "id": event_id,
            "status": status,
            "htmlLink": f"https://calendar.google.com/event?eid={event_id}",
            "created": updated,
            "updated": updated,
            "summary": summary,
            "description": "",
            "location": "",
            "creator": {"email": "jane@example.com"},
            "organizer": {"email": "jane@example.com", "displayName": "Jane"},
            "start": {key: start, **zone},
            "end": {key: end, **zone},
            "iCalUID": ical_uid or f"{event_id}@google.com",
            "attendees": [{"email": a, "responseStatus": "accepted"} for a in attendees],
        }
        try:  # Google refuses an event that is not on the calendar (400): so does the fake
            parse_when(_start(event))
            parse_when(_end(event))
        except ValueError:
            raise ValueError(f"Google Calendar holds no event at {start!r}-{end!r}") from None
        self.calendars[calendar_id]["_events"].append(event)

    def _calendars(self, request: Request, _: re.Match[str]) -> Response:
        items = [
            {k: v for k, v in c.items() if not k.startswith("_")} for c in self.calendars.values()
        ]
        chunk, following = page_slice(items, 0, min(int(request.arg("maxResults", "100")), 250))
        body: dict[str, Any] = {"kind": "calendar#calendarList", "items": chunk}
        if following is not None:
            body["nextPageToken"] = self.page_token(following)
        return Response.json(body)

    def _events(self, request: Request, found: re.Match[str]) -> Response:
        calendar = self.calendars.get(unquote(found.group(1)))
        if calendar is None:
            return Response.json({"error": {"code": 404, "message": "Not Found"}}, 404)
        if request.arg("orderBy") == "startTime" and request.arg("singleEvents") != "true":
            return Response.json(
                {
                    "error": {
                        "code": 400,
                        "message": "The requested ordering is not available for the "
                        "particular query.",
                    }
                },
                400,
            )
        terms = words(request.arg("q"))
        low, high = request.arg("timeMin"), request.arg("timeMax")
        hits = [
            e
            for e in calendar["_events"]
            if matches_all(
                terms,
                e["summary"],
                e["description"],
                e["location"],
                *(a["email"] for a in e["attendees"]),
            )
            and (not low or parse_when(_end(e)) > parse_when(low))
            and (not high or parse_when(_start(e)) < parse_when(high))
        ]
        hits.sort(key=lambda e: parse_when(_start(e)))
        epoch = self.token_epoch + self._epochs.get(calendar["id"], 0)
        raw = request.arg("pageToken")
        offset = token_offset(raw, epoch) if raw else 0
        if offset is None:
            return Response.json(google_invalid_value("pageToken"), 400)
        chunk, following = page_slice(
            hits, offset, min(int(request.arg("maxResults", "250")), 2500)
        )
        body: dict[str, Any] = {
            "kind": "calendar#events",
            "summary": calendar["id"],
            "timeZone": calendar["timeZone"],
            "items": chunk,
        }
        if following is not None:
            body["nextPageToken"] = offset_token(following, epoch)
        return Response.json(body)
