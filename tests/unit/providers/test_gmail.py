"""Gmail adapter: q with widened bounds, list and metadata parsing."""

from __future__ import annotations

from datetime import UTC, datetime

from service.workspace.model import ProviderQuery, TimeRange
from service.workspace.providers import gmail
from tests.unit.providers.recorded_data import load


def test_native_operators_kept_verbatim() -> None:
    query = ProviderQuery(
        "from:jane@example.com subject:(budget OR forecast)", limit=50, cursor="p2"
    )
    path, params = gmail.build_request(query)
    assert path == "/gmail/v1/users/me/messages"
    assert params == {
        "q": "from:jane@example.com subject:(budget OR forecast)",
        "maxResults": 20,
        "pageToken": "p2",
    }


def test_dates_widen_by_a_second_and_parenthesise() -> None:
    window = TimeRange(
        datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 3, 2, 0, 0, 0, 1, tzinfo=UTC)
    )
    q = gmail.build_q(ProviderQuery("budget OR forecast", time_range=window))
    start = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp())
    assert q == f"(budget OR forecast) after:{start - 1} before:{start + 86400 + 2}"
    assert gmail.build_q(ProviderQuery("", time_range=window)).startswith("after:")


def test_detail_request_asks_metadata_only() -> None:
    path, params = gmail.detail_request("18e1a")
    assert path == "/gmail/v1/users/me/messages/18e1a"
    assert params["format"] == "metadata"
    assert params["metadataHeaders"] == ["Subject", "From"]


def test_parse_list_and_empty_list() -> None:
    assert gmail.parse_list(load("gmail_list")) == (["18e1a", "18e1b"], "09876543210", 201)
    assert gmail.parse_list(load("gmail_list_empty")) == ([], None, 0)


def test_parse_message() -> None:
    doc = gmail.parse_message(load("gmail_message"))
    assert doc.id == "18e1a"
    assert doc.title == "Budget"
    assert doc.url == "https://mail.google.com/mail/u/0/#all/18e1a"
    assert doc.content == "Here's the Q2 budget & forecast"
    assert doc.author == "Jane Doe <jane@example.com>"
    assert doc.container == "18e19"
    assert doc.modified_at == datetime.fromtimestamp(1712345678, tz=UTC)


def test_missing_subject() -> None:
    doc = gmail.parse_message(
        {"id": "x", "snippet": "", "internalDate": "0", "payload": {"headers": []}}
    )
    assert doc.title == "(No subject)"
