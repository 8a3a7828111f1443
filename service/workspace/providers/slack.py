"""Slack Real-time Search (`assistant.search.context`): messages and files."""

from __future__ import annotations

import math
import re
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

from msgspec import structs

from service.workspace.error_bodies import safe_scopes
from service.workspace.http import HttpClient
from service.workspace.model import (
    Kind,
    NativeDocument,
    ProviderError,
    ProviderPage,
    ProviderQuery,
    QueryCard,
    QueryState,
)
from service.workspace.providers._common import (
    as_dict,
    check_card,
    dicts,
    from_epoch,
    interleave,
    join_messages,
    sub,
    text,
    unquoted,
)
from service.workspace.statuses import (
    DEFAULT_RETRY_AFTER,
    missing_scope_error,
    retry_after_seconds,
)

DEFAULT_BASE_URL = "https://slack.com"
KINDS: tuple[Kind, ...] = ()
MAX_TEXT_LENGTH = 2000  # the service's cap on native query text

CARD = check_card(
    "slack",
    QueryCard(
        syntax=(
            "a question (what/how…?) enables meaning-based matching where Slack AI is on; "
            "keyword retrieval (without Slack AI, or for an empty query) requires every word "
            'and does not support OR; `"exact phrase"` and prefix `psca*` work.'
        ),
        scope=(
            "modifiers `in:<#CHANNEL_ID>`, `with:<@USER_ID>`, `is:dm`, `is:thread`, "
            "`has:file`, `has:pin` (ids taken from earlier results); to browse a conversation "
            "send an empty query with `in:<#CHANNEL_ID>` and a time range."
        ),
        example='"deploy freeze"',
        avoid=(
            "joining alternatives with OR or spaces in one query (keyword search then matches "
            "nothing); send them as separate native queries."
        ),
    ),
)

SEARCH_PATH = "/api/assistant.search.context"
MAX_LIMIT = 20
# Refused credentials only; a missing scope or permission is a failure of this request.
RECONNECT_ERRORS = frozenset(
    {"invalid_auth", "token_revoked", "not_authed", "token_expired", "account_inactive"}
)
PERMISSION_ERRORS = frozenset({"missing_scope", "no_permission"})
RATE_LIMIT_ERRORS = frozenset({"ratelimited", "rate_limited"})
OR_HINT = (
    "Slack keyword search does not support OR; send the alternatives as separate native "
    "queries"
)
_OR = re.compile(r"(?<![\w:-])OR(?![\w:-])")
_CHANNEL_SCOPES = (
    ("search:read.public", "public_channel"),
    ("search:read.private", "private_channel"),
    ("search:read.mpim", "mpim"),
    ("search:read.im", "im"),
)


_CHANNEL_NAMES = {
    "public_channel": "public channels",
    "private_channel": "private channels",
    "mpim": "group DMs",
    "im": "DMs",
}
FILES_SCOPE = "search:read.files"


def card_for(scopes: tuple[str, ...]) -> QueryCard:
    """The card of an account with these granted scopes (what it can search)."""
    if not scopes:
        said = (
            "This account was connected without its scopes: every channel type is asked "
            f"for, and files are not searched (they need {FILES_SCOPE})."
        )
    elif "search:read.public" not in scopes:
        said = (
            "This account's token lacks search:read.public: its searches fail until it is "
            "reconnected granting it."
        )
    else:
        places = ", ".join(_CHANNEL_NAMES[kind] for kind in channel_types(scopes))
        files = (
            " and files" if FILES_SCOPE in scopes
            else f"; not files (reconnect granting {FILES_SCOPE})"
        )
        said = f"This account searches messages in {places}{files}."
    return replace(CARD, scope=f"{CARD.scope} {said}")


def channel_types(scopes: tuple[str, ...]) -> list[str]:
    """Channel types the granted scopes allow; every type when the scopes are unknown."""
    if not scopes:
        return [kind for _, kind in _CHANNEL_SCOPES]
    return [kind for scope, kind in _CHANNEL_SCOPES if scope in scopes]


def _query_text(query: ProviderQuery) -> str:
    terms = query.text.strip()
    if terms or not query.time_range.is_set:
        return terms
    # An empty query lists by date modifiers; Slack's day modifiers are exclusive, so widen.
    modifiers = []
    if query.time_range.start is not None:
        day = (query.time_range.start - timedelta(days=1)).date()
        modifiers.append(f"after:{day.isoformat()}")
    if query.time_range.end is not None:
        day = (query.time_range.end + timedelta(days=1)).date()
        modifiers.append(f"before:{day.isoformat()}")
    return " ".join(modifiers)


def build_request(query: ProviderQuery, scopes: tuple[str, ...] = ()) -> dict[str, Any]:
    """JSON body of `assistant.search.context`; NEEDS_RECONNECT when RTS scopes are missing."""
    types = channel_types(scopes)
    if not types or (scopes and "search:read.public" not in scopes):
        # The credential works; it only lacks a scope: a permission failure that names it,
        # not NEEDS_RECONNECT (which would hide the account's card and guidance).
        raise missing_scope_error(["search:read.public"], "Slack search")
    body: dict[str, Any] = {
        "query": _query_text(query),
        "channel_types": ",".join(types),
        "content_types": "messages,files" if FILES_SCOPE in scopes else "messages",
        "include_archived_channels": True,
        "include_context_messages": True,
        "limit": max(1, min(query.limit, MAX_LIMIT)),
    }
    if query.time_range.start is not None:
        body["after"] = math.floor(query.time_range.start.timestamp())
    if query.time_range.end is not None:
        body["before"] = math.ceil(query.time_range.end.timestamp())
    if not query.text.strip():
        body["disable_semantic_search"] = True
    if query.cursor:
        body["cursor"] = query.cursor
    return body


def error_for(
    code: str, retry_after: float | None = None, *, needed: str = "", provided: str = ""
) -> ProviderError:
    """Map a Slack `ok: false` error code (with `missing_scope`'s `needed` / `provided`
    scopes and the `Retry-After` wait) to the per-query state."""
    if code in RATE_LIMIT_ERRORS:
        wait = DEFAULT_RETRY_AFTER if retry_after is None else retry_after
        return ProviderError(
            QueryState.RATE_LIMITED,
            f"Slack rate limit reached ({code}); retry in {wait:.0f} s",
            retry_after=wait,
        )
    if code in RECONNECT_ERRORS:
        return ProviderError(
            QueryState.NEEDS_RECONNECT, f"Slack denied access ({code}); reconnect Slack"
        )
    if code in PERMISSION_ERRORS:
        return _permission_error(code, safe_scopes(needed), safe_scopes(provided))
    safe = "".join(ch for ch in code if ch.isalnum() or ch in "_-")[:80] or "unknown_error"
    return ProviderError(QueryState.FAILED, f"Slack search failed ({safe})")


def _permission_error(code: str, needed: list[str], provided: list[str]) -> ProviderError:
    if needed:
        granted = f" (granted: {', '.join(provided)})" if provided else ""
        detail = f": the token lacks the scope {', '.join(needed)}{granted}; reconnect Slack "
        detail += "granting it"
    else:
        detail = "; the token may not read this"
    return ProviderError(
        QueryState.FAILED, f"Slack denied this request ({code}){detail}", retryable=False
    )


def _line(message: dict[str, Any]) -> str:
    author = text(message.get("author_name")) or text(message.get("author_user_id"))
    content = text(message.get("content"))
    return f"{author}: {content}" if author else content


def _message(item: dict[str, Any]) -> NativeDocument:
    context = sub(item, "context_messages") or {}
    before = [_line(m) for m in dicts(sub(context, "before"))]
    after = [_line(m) for m in dicts(sub(context, "after"))]
    channel = text(item.get("channel_name"))
    ts = text(item.get("message_ts"))
    return NativeDocument(
        id=ts,
        title=f"#{channel}" if channel else text(item.get("channel_id")),
        url=text(item.get("permalink")),
        content="\n".join([*before, _line(item), *after]),
        kind="message",
        container=text(item.get("channel_id")),
        author=text(item.get("author_name")),
        modified_at=from_epoch(ts),
    )


def _file(item: dict[str, Any]) -> NativeDocument:
    updated = item.get("date_updated") or item.get("date_created")
    return NativeDocument(
        id=text(item.get("file_id")),
        title=text(item.get("title")),
        url=text(item.get("permalink")),
        content=text(item.get("content")),
        kind="file",
        author=text(item.get("author_name")),
        modified_at=from_epoch(updated),
    )


def parse_response(data: Any, *, retry_after: float | None = None) -> ProviderPage:
    """Page of an `assistant.search.context` answer; `ok: false` raises the mapped error
    (`retry_after`: the answer's `Retry-After` wait, for `ratelimited`)."""
    body = as_dict(data)
    if body.get("ok") is not True:
        raise error_for(
            text(body.get("error")),
            retry_after,
            needed=text(body.get("needed")),
            provided=text(body.get("provided")),
        )
    results = sub(body, "results") or {}
    messages = [doc for doc in map(_message, dicts(sub(results, "messages"))) if doc.id]
    files = [doc for doc in map(_file, dicts(sub(results, "files"))) if doc.id]
    cursor = text(sub(body, "response_metadata", "next_cursor")) or None
    return ProviderPage(tuple(interleave([messages, files])), next_cursor=cursor)


def uses_or(query: str) -> bool:
    """True when the query joins alternatives with OR outside quotes (keyword search: nothing)."""
    return bool(_OR.search(unquoted(query)))


async def search(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """One Real-time Search call; a query using OR gets a hint in the page message."""
    body = build_request(query, http.scopes)
    response = await http.request("POST", SEARCH_PATH, json=body)
    # Slack sends `ratelimited` with a Retry-After also on HTTP 200.
    wait = retry_after_seconds(response.headers, now=time.time())
    page = parse_response(response.data, retry_after=wait)
    if not uses_or(query.text):
        return page
    # A hint, not a refusal: Slack AI semantic search may still answer the query.
    return structs.replace(page, message=join_messages([page.message, OR_HINT]))
