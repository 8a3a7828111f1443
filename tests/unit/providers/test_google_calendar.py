"""Calendar adapter: calendar list, events request, parsing, dedupe."""

from __future__ import annotations

from datetime import UTC, datetime

from service.workspace.model import ProviderQuery, TimeRange
from service.workspace.providers import google_calendar as calendar
from tests.unit.providers.recorded_data import load


def test_calendar_list_keeps_readable_calendars_and_reports_more() -> None:
    ids, more = calendar.parse_calendar_list(load("calendar_list"))
    assert ids == ["jane@example.com", "team#holiday@group.v.calendar.google.com"]
    assert more


def test_events_request_encodes_id_and_rounds_bounds_outward() -> None:
    window = TimeRange(
        datetime(2024, 3, 1, 8, 0, 0, 700_000, tzinfo=UTC),
        datetime(2024, 3, 2, 8, 0, 0, 200_000, tzinfo=UTC),
    )
    path, params = calendar.events_request(
        "team#holiday@group.v.calendar.google.com",
        ProviderQuery("review", time_range=window, limit=5),
        "tok",
    )
    assert path == "/calendar/v3/calendars/team%23holiday%40group.v.calendar.google.com/events"
    assert params == {
        "maxResults": 5,
        "showDeleted": "false",
        "q": "review",
        "timeMin": "2024-03-01T08:00:00Z",
        "timeMax": "2024-03-02T08:00:01Z",
        "singleEvents": "true",
        "orderBy": "startTime",
        "pageToken": "tok",
    }


def test_events_request_without_dates_does_not_expand() -> None:
    _, params = calendar.events_request("primary", ProviderQuery(""), None)
    assert "singleEvents" not in params
    assert "q" not in params


def test_parse_events_drops_cancelled_and_converts_starts() -> None:
    documents, token = calendar.parse_events(load("calendar_events"), "jane@example.com")
    assert token == "CigKGjVy"
    timed, all_day = documents
    assert timed.title == "Design review"
    assert timed.event_start_at == datetime(2024, 3, 5, 9, tzinfo=UTC)
    assert timed.modified_at == datetime(2024, 2, 1, 8, tzinfo=UTC)
    assert timed.author == "jane@example.com"
    assert timed.container == "jane@example.com"
    assert "Location: Room 1" in timed.content
    assert "Attendees: bob@example.com" in timed.content
    assert timed.dedupe_key == "evt1@google.com@2024-03-05T09:00:00+00:00"
    assert all_day.title == "(Untitled event)"
    # All-day dates start at midnight in the calendar's zone (Berlin, UTC+1 in March).
    assert all_day.event_start_at == datetime(2024, 3, 7, 23, tzinfo=UTC)


def test_a_rescheduled_event_keeps_its_identity() -> None:
    """An event moved between two pages is the same result (the paging guarantee: none
    emitted twice): its identity is its iCalUID, and for an instance of a recurring event
    the start the series gave it, not its current start."""
    (timed, all_day), _ = calendar.parse_events(load("calendar_events"), "a")
    data = load("calendar_events")
    for item in data["items"]:
        if "start" in item:
            item["start"] = {"dateTime": "2024-04-01T15:00:00Z"}
    (moved_timed, moved_all_day), _ = calendar.parse_events(data, "a")
    assert moved_timed.event_start_at != timed.event_start_at
    assert moved_timed.dedupe_key == timed.dedupe_key  # the instance of 2024-03-05
    assert moved_all_day.dedupe_key == all_day.dedupe_key == "evt3@google.com"


def test_dedupe_keeps_first_occurrence() -> None:
    documents, _ = calendar.parse_events(load("calendar_events"), "a")
    again, _ = calendar.parse_events(load("calendar_events"), "b")
    kept = calendar.dedupe([*documents, *again])
    assert [d.container for d in kept] == ["a", "a"]
