"""Google Drive `files.list` search; what it searches follows the account's granted scopes.

Scopes (full `https://www.googleapis.com/auth/...` URLs or their short names):

- `drive`, `drive.readonly` (every file's content), `drive.metadata`, `drive.metadata.readonly`
  (every file's metadata): My Drive, files shared with the user and every shared drive they
  belong to (`corpora=allDrives`, `includeItemsFromAllDrives`, `supportsAllDrives`);
- `drive.file` alone: only the files created with or opened in this app (`corpora=user`,
  no shared-drive flags), and a `drive:ID` project is refused naming `drive.readonly`;
- scopes known but none of Drive's: refused before any request, naming `drive.readonly`;
- scopes unknown (none stored): searched as with `drive.readonly`.
"""

from __future__ import annotations

import re
from dataclasses import replace
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
from service.workspace.statuses import missing_scope_error

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
SCOPE_PREFIX = "https://www.googleapis.com/auth/"
# Scopes that see every file the user can open, shared drives included: with its content, or
# its metadata only.
CONTENT_SCOPES = frozenset({"drive", "drive.readonly"})
METADATA_SCOPES = frozenset({"drive.metadata", "drive.metadata.readonly"})
ALL_FILES_SCOPES = CONTENT_SCOPES | METADATA_SCOPES
APP_FILES_SCOPE = "drive.file"  # only files created with or opened in this app
SEARCH_SCOPE = SCOPE_PREFIX + "drive.readonly"  # the scope named when one is missing
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


def drive_scopes(scopes: tuple[str, ...]) -> set[str]:
    """The granted Drive scopes by short name (`drive.readonly`)."""
    return {scope.removeprefix(SCOPE_PREFIX) for scope in scopes}


def all_drives(scopes: tuple[str, ...]) -> bool:
    """True when the scopes (or unknown scopes) let a search cover every drive; raises the
    missing-scope failure when known scopes grant no Drive access at all."""
    granted = drive_scopes(scopes)
    if not scopes or granted & ALL_FILES_SCOPES:
        return True
    if APP_FILES_SCOPE in granted:
        return False
    raise missing_scope_error([SEARCH_SCOPE], "Drive search")


def build_request(
    query: ProviderQuery, scopes: tuple[str, ...] = ()
) -> tuple[str, dict[str, str | int]]:
    """Path and params of the `files.list` call; shared drives only when `scopes` allow."""
    everything = all_drives(scopes)
    params: dict[str, str | int] = {
        "q": build_q(query),
        "fields": FIELDS,
        "pageSize": max(1, min(query.limit, MAX_PAGE_SIZE)),
        "spaces": "drive",
    }
    if everything:
        params.update(
            corpora="allDrives", supportsAllDrives="true", includeItemsFromAllDrives="true"
        )
    else:
        params["corpora"] = "user"
    project = query.project.strip()
    if project:
        if not project.startswith("drive:") or not project[len("drive:") :].strip():
            raise failed("Drive project must be drive:<DRIVE_ID>")
        if not everything:
            raise missing_scope_error([SEARCH_SCOPE], "searching a shared drive")
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


def card_for(scopes: tuple[str, ...]) -> QueryCard:
    """The card of an account with these granted scopes (what it can search)."""
    granted = drive_scopes(scopes)
    if not scopes:
        return CARD
    if granted & CONTENT_SCOPES:
        said = "This account searches My Drive, files shared with it and its shared drives."
    elif granted & METADATA_SCOPES:
        said = (
            "This account's token reads metadata only (drive.metadata): My Drive, shared "
            "files and shared drives are searched by name, owner and type; `fullText` may "
            "miss file content."
        )
    elif APP_FILES_SCOPE in granted:
        said = (
            "This account's token has only drive.file: it searches the files created with or "
            "opened in this app, not the rest of Drive nor shared drives (`drive:ID` is "
            "refused); reconnect granting drive.readonly to search everything."
        )
    else:
        said = (
            "This account's token has no Drive scope: its searches fail until it is "
            "reconnected granting drive.readonly."
        )
    return replace(CARD, scope=f"{CARD.scope} {said}")


async def search(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """One `files.list` call."""
    path, params = build_request(query, http.scopes)
    return parse_response(await http.get_json(path, params=params))
