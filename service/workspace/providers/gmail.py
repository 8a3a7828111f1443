"""Gmail `users.messages.list` search plus metadata reads of each message."""

from __future__ import annotations

import html
import math
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from service.workspace.http import HttpClient
from service.workspace.model import Kind, NativeDocument, ProviderPage, ProviderQuery, QueryCard
from service.workspace.providers._common import (
    LegResult,
    as_dict,
    check_card,
    dicts,
    documents_of,
    from_epoch,
    gather_legs,
    join_messages,
    settle,
    sub,
    text,
)

DEFAULT_BASE_URL = "https://gmail.googleapis.com"
KINDS: tuple[Kind, ...] = ()
MAX_TEXT_LENGTH = 2000  # the service's cap on native query text

CARD = check_card(
    "gmail",
    QueryCard(
        syntax=(
            "Gmail operators: space-separated words must all match; uppercase `OR` or `{a b}` "
            'joins alternatives; `-word` excludes; `"exact phrase"`; parentheses group.'
        ),
        scope=(
            "`from:`, `to:`, `cc:`, `subject:`, `label:`, `has:attachment`, `filename:`, "
            "`in:sent`, `from:me`, `is:unread`; spam and trash are not searched."
        ),
        example="from:jane@example.com subject:(budget OR forecast)",
        avoid=(
            "alternatives separated only by spaces (all are required) or lowercase `or` (a "
            "word); results are single messages, never claim a whole conversation was searched."
        ),
    ),
)

LIST_PATH = "/gmail/v1/users/me/messages"
MAX_RESULTS = 20
DETAIL_CONCURRENCY = 10
DETAIL_FIELDS = "id,threadId,labelIds,snippet,internalDate,payload/headers"
UNREAD_TITLE = "(message details unavailable)"


def build_q(query: ProviderQuery) -> str:
    """Native text, parenthesised when date bounds (widened by a second) are appended."""
    terms = query.text.strip()
    bounds = []
    if query.time_range.start is not None:
        bounds.append(f"after:{math.floor(query.time_range.start.timestamp()) - 1}")
    if query.time_range.end is not None:
        bounds.append(f"before:{math.ceil(query.time_range.end.timestamp()) + 1}")
    if terms and bounds:
        terms = f"({terms})"
    return " ".join([terms, *bounds]).strip()


def build_request(query: ProviderQuery) -> tuple[str, dict[str, str | int]]:
    """Path and params of the `messages.list` call."""
    params: dict[str, str | int] = {
        "q": build_q(query),
        "maxResults": max(1, min(query.limit, MAX_RESULTS)),
    }
    if query.cursor:
        params["pageToken"] = query.cursor
    return LIST_PATH, params


def detail_request(message_id: str) -> tuple[str, dict[str, str | list[str]]]:
    """Path and params reading one message's metadata (subject, sender, snippet, date)."""
    params: dict[str, str | list[str]] = {
        "format": "metadata",
        "metadataHeaders": ["Subject", "From"],
        "fields": DETAIL_FIELDS,
    }
    return f"{LIST_PATH}/{quote(message_id, safe='')}", params


def parse_list(data: Any) -> tuple[list[str], str | None, int | None]:
    """Message ids, nextPageToken and resultSizeEstimate of a list answer."""
    body = as_dict(data)
    ids = [mid for item in dicts(body.get("messages")) if (mid := text(item.get("id")))]
    estimate = body.get("resultSizeEstimate")
    return (
        ids,
        text(body.get("nextPageToken")) or None,
        estimate if isinstance(estimate, int) else None,
    )


def message_url(message_id: str) -> str:
    """The Gmail web link of a message (also its identity in fusion)."""
    return f"https://mail.google.com/mail/u/0/#all/{message_id}"


def stub(message_id: str) -> NativeDocument:
    """A listed message before its metadata is read (see `hydrate`)."""
    return NativeDocument(
        id=message_id, title=UNREAD_TITLE, url=message_url(message_id), kind="message", stub=True
    )


def parse_message(data: Any) -> NativeDocument:
    """A message metadata answer as a document."""
    body = as_dict(data)
    headers = {
        text(h.get("name")).lower(): text(h.get("value"))
        for h in dicts(sub(body, "payload", "headers"))
    }
    message_id = text(body.get("id"))
    return NativeDocument(
        id=message_id,
        title=headers.get("subject") or "(No subject)",
        url=message_url(message_id),
        content=html.unescape(text(body.get("snippet"))),
        kind="message",
        container=text(body.get("threadId")),
        author=headers.get("from", ""),
        modified_at=from_epoch(body.get("internalDate"), millis=True),
    )


async def _detail(http: HttpClient, message_id: str) -> LegResult:
    path, params = detail_request(message_id)
    document = parse_message(await http.get_json(path, params=params))
    return LegResult((document,) if document.id else ())


async def search(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """List matching messages, then read each one's metadata (bounded concurrency)."""
    path, params = build_request(query)
    ids, next_token, estimate = parse_list(await http.get_json(path, params=params))

    def call(message_id: str) -> Callable[[], Awaitable[LegResult]]:
        return lambda: _detail(http, message_id)

    outcomes = await gather_legs([call(mid) for mid in ids], concurrency=DETAIL_CONCURRENCY)
    settled = settle([(f"message {mid}", out) for mid, out in zip(ids, outcomes, strict=True)])
    return ProviderPage(
        documents_of(settled.legs),
        next_cursor=next_token,
        total=estimate,
        total_is_exact=False,
        partial=bool(settled.messages),
        message=join_messages(settled.messages),
        complete=settled.complete,
        retry_after=settled.retry_after,
    )


async def search_ids(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """`messages.list` only: message stubs, whose metadata `hydrate` reads once emitted.

    Fused pages show a few of the listed messages, so reading every one's metadata up front
    (a request each) is mostly wasted; the engine uses this when no time range must be
    rechecked against each message's date.
    """
    path, params = build_request(query)
    ids, next_token, estimate = parse_list(await http.get_json(path, params=params))
    return ProviderPage(
        tuple(stub(mid) for mid in ids),
        next_cursor=next_token,
        total=estimate,
        total_is_exact=False,
    )


async def hydrate(http: HttpClient, document: NativeDocument) -> NativeDocument:
    """The message behind a stub, with subject, sender, snippet and date."""
    path, params = detail_request(document.id)
    full = parse_message(await http.get_json(path, params=params))
    return full if full.id == document.id else document
