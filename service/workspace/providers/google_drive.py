"""Google Drive `files.list` search."""

from __future__ import annotations

import re
from typing import Any

from service.workspace.http import HttpClient
from service.workspace.model import Kind, NativeDocument, ProviderPage, ProviderQuery, QueryCard
from service.workspace.providers._common import (
    as_dict,
    check_card,
    dicts,
    failed,
    parse_time,
    rfc3339,
    text,
    unquoted,
)

DEFAULT_BASE_URL = "https://www.googleapis.com"
KINDS: tuple[Kind, ...] = ()
MAX_TEXT_LENGTH = 2000  # the service's cap on native query text

CARD = check_card(
    "google_drive",
    QueryCard(
        syntax=(
            "Drive `q`: every clause is `term operator value` (or `'value' in owners|writers|"
            "readers|parents`), strings single-quoted; `fullText contains 'word'` matches whole "
            "words in name/description/content, `fullText contains '\"exact phrase\"'` a phrase, "
            "`name contains 'x'` matches the start of a title; combine with `and`/`or`/`not`/"
            "parentheses; escape `'` as `\\'` and `\\` as `\\\\`."
        ),
        scope=(
            "`'person@example.com' in owners` (or writers/readers), `mimeType = "
            "'application/vnd.google-apps.document'` (or spreadsheet/presentation/folder), "
            "`'FOLDER_ID' in parents`; `project` `drive:DRIVE_ID` searches one shared drive "
            "(whose files have no owners)."
        ),
        example="fullText contains 'roadmap' and 'jane@example.com' in owners",
        avoid=(
            "mixing bare words with clauses (Drive rejects bare words; text without any clause "
            "is sent as one `fullText contains`); `trashed`/`modifiedTime` clauses (the server "
            "adds them from the time range); expecting comments to be searched."
        ),
    ),
)

FILES_PATH = "/drive/v3/files"
FIELDS = (
    "nextPageToken,incompleteSearch,files(id,name,mimeType,webViewLink,description,"
    "modifiedTime,owners(displayName,emailAddress))"
)
MAX_PAGE_SIZE = 1000
_OPERATOR = re.compile(r"[=<>]")
_KEYWORD = re.compile(r"\b(?:contains|in|has)\b")
_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'")


def escape(value: str) -> str:
    """A Drive string literal body: `\\` as `\\\\`, `'` as `\\'`."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


def is_native(query: str) -> bool:
    """True when the text is written in Drive's clause grammar rather than as plain words."""
    if _OPERATOR.search(unquoted(query)):
        return True
    bare = _LITERAL.sub(" ", query)
    return bool(_LITERAL.search(query)) and bool(_KEYWORD.search(bare))


def build_q(query: ProviderQuery) -> str:
    """`trashed = false and (<native q or fullText>)` plus modifiedTime bounds."""
    terms = query.text.strip()
    clauses = ["trashed = false"]
    if terms:
        inner = terms if is_native(terms) else f"fullText contains '{escape(terms)}'"
        clauses.append(f"({inner})")
    if query.time_range.start is not None:
        clauses.append(f"modifiedTime >= '{rfc3339(query.time_range.start)}'")
    if query.time_range.end is not None:
        clauses.append(f"modifiedTime < '{rfc3339(query.time_range.end)}'")
    return " and ".join(clauses)


def build_request(query: ProviderQuery) -> tuple[str, dict[str, str | int]]:
    """Path and params of the `files.list` call."""
    params: dict[str, str | int] = {
        "q": build_q(query),
        "fields": FIELDS,
        "pageSize": max(1, min(query.limit, MAX_PAGE_SIZE)),
        "spaces": "drive",
        "supportsAllDrives": "true",
        "includeItemsFromAllDrives": "true",
    }
    project = query.project.strip()
    if project:
        if not project.startswith("drive:") or not project[len("drive:") :].strip():
            raise failed("Drive project must be drive:<DRIVE_ID>")
        params["corpora"] = "drive"
        params["driveId"] = project[len("drive:") :].strip()
    if query.cursor:
        params["pageToken"] = query.cursor
    return FILES_PATH, params


def _document(item: dict[str, Any]) -> NativeDocument:
    file_id = text(item.get("id"))
    name = text(item.get("name"))
    owners = [text(owner.get("displayName")) for owner in dicts(item.get("owners"))]
    return NativeDocument(
        id=file_id,
        title=name,
        url=text(item.get("webViewLink")) or f"https://drive.google.com/file/d/{file_id}/view",
        content=text(item.get("description")) or name,
        kind=text(item.get("mimeType")),
        author=", ".join(owner for owner in owners if owner),
        modified_at=parse_time(item.get("modifiedTime")),
    )


def parse_response(data: Any) -> ProviderPage:
    """Page of a `files.list` answer; `incompleteSearch` marks it partial."""
    body = as_dict(data)
    documents = tuple(doc for doc in map(_document, dicts(body.get("files"))) if doc.id)
    incomplete = body.get("incompleteSearch") is True
    return ProviderPage(
        documents,
        next_cursor=text(body.get("nextPageToken")) or None,
        partial=incomplete,
        message="Drive searched only part of the files (incompleteSearch)." if incomplete else "",
    )


async def search(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """One `files.list` call."""
    path, params = build_request(query)
    return parse_response(await http.get_json(path, params=params))
