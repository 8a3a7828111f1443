"""Drive adapter: q building with escaping, params, parsing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from service.workspace.model import ProviderError, ProviderQuery, TimeRange
from service.workspace.providers import google_drive
from tests.unit.providers.recorded_data import load


def test_plain_words_become_escaped_full_text() -> None:
    q = google_drive.build_q(ProviderQuery("owner's \\ launch"))
    assert q == "trashed = false and (fullText contains 'owner\\'s \\\\ launch')"


def test_native_q_is_kept() -> None:
    native = "fullText contains 'roadmap' and 'jane@example.com' in owners"
    assert google_drive.build_q(ProviderQuery(native)) == f"trashed = false and ({native})"
    assert google_drive.is_native("mimeType = 'application/pdf'")
    assert google_drive.is_native("starred = true")
    assert not google_drive.is_native("bugs in login")


def test_empty_query_with_dates() -> None:
    window = TimeRange(datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 4, 1, tzinfo=UTC))
    assert google_drive.build_q(ProviderQuery("", time_range=window)) == (
        "trashed = false and modifiedTime >= '2024-03-01T00:00:00Z' "
        "and modifiedTime < '2024-04-01T00:00:00Z'"
    )


def test_params_with_shared_drive_and_cursor() -> None:
    path, params = google_drive.build_request(
        ProviderQuery("x", project="drive:0AbC", cursor="tok", limit=5)
    )
    assert path == "/drive/v3/files"
    assert params["corpora"] == "drive"
    assert params["driveId"] == "0AbC"
    assert params["pageToken"] == "tok"
    assert params["pageSize"] == 5
    assert params["supportsAllDrives"] == "true"
    assert params["includeItemsFromAllDrives"] == "true"
    assert params["spaces"] == "drive"
    assert "incompleteSearch" in str(params["fields"])


def test_other_project_fails() -> None:
    with pytest.raises(ProviderError):
        google_drive.build_request(ProviderQuery("x", project="folder123"))


def test_parse_files_incomplete_is_partial() -> None:
    page = google_drive.parse_response(load("drive_files"))
    doc, sheet = page.documents
    assert (doc.id, doc.title, doc.kind) == (
        "1AbC",
        "Roadmap 2024",
        "application/vnd.google-apps.document",
    )
    assert doc.author == "Jane Doe, Bob"
    assert doc.content == "Product roadmap"
    assert doc.modified_at == datetime(2024, 3, 4, 12, tzinfo=UTC)
    assert sheet.url == "https://drive.google.com/file/d/2DeF/view"
    assert sheet.content == "budget.xlsx"
    assert page.partial
    assert page.next_cursor == "~!!~AI9FV7Q"


GOOGLE = "https://www.googleapis.com/auth/"


@pytest.mark.parametrize(
    ("scopes", "corpora"),
    [
        ((), "allDrives"),
        ((GOOGLE + "drive.readonly",), "allDrives"),
        (("drive", "openid"), "allDrives"),
        ((GOOGLE + "drive.metadata.readonly",), "allDrives"),
        ((GOOGLE + "drive.file", "email"), "user"),
    ],
)
def test_scopes_choose_the_corpora(scopes: tuple[str, ...], corpora: str) -> None:
    _, params = google_drive.build_request(ProviderQuery("x"), scopes)
    assert params["corpora"] == corpora
    shared = {params.get("includeItemsFromAllDrives"), params.get("supportsAllDrives")}
    assert shared == ({"true"} if corpora == "allDrives" else {None})


def test_app_files_scope_refuses_a_shared_drive_and_no_drive_scope_refuses_all() -> None:
    for scopes, project in [((GOOGLE + "drive.file",), "drive:0AbC"), (("email",), "")]:
        with pytest.raises(ProviderError) as caught:
            google_drive.build_request(ProviderQuery("x", project=project), scopes)
        assert f"lacks the scope {GOOGLE}drive.readonly" in caught.value.message
        assert not caught.value.retryable


def test_card_says_what_the_scopes_search() -> None:
    assert google_drive.card_for(()) == google_drive.CARD
    assert "shared drives." in google_drive.card_for(("drive",)).scope
    assert "not the rest of Drive nor shared drives" in google_drive.card_for(
        (GOOGLE + "drive.file",)
    ).scope
