"""Slack Real-time Search adapter: request body, `ok: false` mapping, parsing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from service.workspace.model import ProviderError, ProviderQuery, QueryState, TimeRange
from service.workspace.providers import slack
from tests.unit.providers.recorded_data import load

ALL_SCOPES = ("search:read.public", "search:read.private", "search:read.im", "search:read.files")


def test_request_body_from_scopes_with_limit_clamped() -> None:
    body = slack.build_request(ProviderQuery('"deploy freeze"', limit=50, cursor="abc"), ALL_SCOPES)
    assert body == {
        "query": '"deploy freeze"',
        "channel_types": "public_channel,private_channel,im",
        "content_types": "messages,files",
        "include_archived_channels": True,
        "include_context_messages": True,
        "limit": 20,
        "cursor": "abc",
    }


def test_unknown_scopes_search_every_channel_type() -> None:
    body = slack.build_request(ProviderQuery("x"))
    assert body["channel_types"] == "public_channel,private_channel,mpim,im"
    assert body["content_types"] == "messages"


def test_missing_search_scope_is_a_permission_failure_naming_it_without_a_call() -> None:
    with pytest.raises(ProviderError) as caught:
        slack.build_request(ProviderQuery("x"), ("channels:read",))
    assert caught.value.state is QueryState.FAILED
    assert not caught.value.retryable
    assert "search:read.public" in caught.value.message


def test_empty_query_with_dates_uses_widened_day_modifiers() -> None:
    window = TimeRange(
        datetime(2024, 3, 5, 12, tzinfo=UTC), datetime(2024, 3, 6, 0, 0, 1, 500, tzinfo=UTC)
    )
    body = slack.build_request(ProviderQuery("", time_range=window))
    assert body["query"] == "after:2024-03-04 before:2024-03-07"
    assert body["after"] == int(datetime(2024, 3, 5, 12, tzinfo=UTC).timestamp())
    assert body["before"] == int(datetime(2024, 3, 6, 0, 0, 2, tzinfo=UTC).timestamp())
    assert body["disable_semantic_search"] is True


def test_parse_messages_files_and_cursor() -> None:
    page = slack.parse_response(load("slack_search_context"))
    message, file = page.documents
    assert message.id == "1712345678.123456"
    assert message.title == "#eng"
    assert message.container == "C123ABC456"
    assert (
        message.content
        == "Bob: when is the freeze?\nJane: deploy freeze starts Friday\nAnn: thanks"
    )
    assert message.modified_at == datetime.fromtimestamp(1712345678.123456, tz=UTC)
    assert file.id == "F0123"
    assert file.kind == "file"
    assert file.modified_at == datetime.fromtimestamp(1712300000, tz=UTC)
    assert page.next_cursor == "bGFzdF90czoxNzEyMzQ1Njc4"


@pytest.mark.parametrize(
    ("code", "state"),
    [
        ("ratelimited", QueryState.RATE_LIMITED),
        ("rate_limited", QueryState.RATE_LIMITED),
        ("invalid_auth", QueryState.NEEDS_RECONNECT),
        ("missing_scope", QueryState.FAILED),
        ("token_revoked", QueryState.NEEDS_RECONNECT),
        ("not_authed", QueryState.NEEDS_RECONNECT),
        ("internal_error", QueryState.FAILED),
        ("", QueryState.FAILED),
    ],
)
def test_ok_false_maps_errors(code: str, state: QueryState) -> None:
    with pytest.raises(ProviderError) as caught:
        slack.parse_response({"ok": False, "error": code})
    assert caught.value.state is state


def test_recorded_missing_scope() -> None:
    with pytest.raises(ProviderError) as caught:
        slack.parse_response(load("slack_error_missing_scope"))
    assert caught.value.state is QueryState.FAILED  # a scope to add, not a refused credential
    assert not caught.value.retryable
    assert "missing_scope" in caught.value.message
    assert "lacks the scope search:read.public (granted: channels:read)" in caught.value.message


def test_ratelimited_carries_the_wait_or_a_default() -> None:
    with pytest.raises(ProviderError) as caught:
        slack.parse_response({"ok": False, "error": "ratelimited"}, retry_after=7.0)
    assert (caught.value.state, caught.value.retry_after) == (QueryState.RATE_LIMITED, 7.0)
    assert slack.error_for("ratelimited").retry_after == 60.0


def test_missing_scope_names_only_plain_scope_names() -> None:
    error = slack.error_for("missing_scope", needed="<b>x</b> search:read.im", provided="")
    assert "search:read.im" in error.message
    assert "<" not in error.message


def test_error_codes_are_sanitised() -> None:
    error = slack.error_for("<script>" + "x" * 500)
    assert "<" not in error.message
    assert len(error.message) < 120


def test_no_next_cursor_means_exhausted() -> None:
    page = slack.parse_response(
        {"ok": True, "results": {"messages": []}, "response_metadata": {"next_cursor": ""}}
    )
    assert page.next_cursor is None
    assert page.documents == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("trip OR travel", True), ("in:<#C1> OR deploy", True), ("trip or travel", False),
     ('"trip OR travel"', False), ("ORACLE outage", False), ("trip", False)],
)
def test_or_outside_quotes_is_detected_for_the_hint(text: str, expected: bool) -> None:
    assert slack.uses_or(text) is expected


def test_card_names_the_channels_and_files_the_scopes_reach() -> None:
    full = slack.card_for(("search:read.public", "search:read.mpim", "search:read.files"))
    assert full.scope.endswith("This account searches messages in public channels, group DMs "
                               "and files.")
    assert "not files (reconnect granting search:read.files)" in slack.card_for(
        ("search:read.public",)
    ).scope
    assert "lacks search:read.public" in slack.card_for(("search:read.im",)).scope
    assert "connected without its scopes" in slack.card_for(()).scope
