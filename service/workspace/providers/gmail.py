"""Gmail `users.messages.list` search, with message metadata read through Gmail's batch endpoint.

Metadata of listed messages comes from `POST /batch/gmail/v1`: one multipart/mixed request
carrying up to `MAX_BATCH` `messages.get` calls, answered by one multipart/mixed response
with a complete HTTP response (status line, headers, JSON) per call, matched by Content-ID
(`<response-ID>` for a request's `<ID>`). The batch is one HTTP request against the query's
budget (`HttpClient.requests_made`), but Google meters every inner call: n reads cost n
`messages.get`, 5 quota units each, of the user's 15,000 units a minute.

Each part settles on its own: 404 (deleted since listing) drops the message; any other
non-2xx part maps as a whole answer would (`status_error`, with the part's body), so 429,
403 `rateLimitExceeded` / `userRateLimitExceeded` and 5xx make the page partial and
incomplete (`complete=False`: read again on the next page, so the message is retried), and
a final error (a missing scope) makes it partial only; a garbled part is retried like
malformed JSON. A 401 part refuses the access token as a 401 to the batch would: a renewable
token is renewed once and the batch sent again (a part still refused is then final). Every
part failing raises the worst error, as does a failed batch request.
Stubs hydrated in the same event-loop turn on one `HttpClient` (the pager completes a page's
stubs concurrently) share one batch (`_gather.read_together`).

Links open the account searched, `https://mail.google.com/mail/?authuser=<address>#all/<id>`,
with the address from `users.getProfile`, read once per account through the memo; a message's
link is also its fusion identity, and depends only on the account and the message id.
"""

from __future__ import annotations

import functools
import html
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from msgspec import structs

from service.workspace.http import HttpClient, RawResponse, status_error
from service.workspace.http_wire import loads
from service.workspace.model import (
    Kind,
    NativeDocument,
    ProviderError,
    ProviderId,
    ProviderPage,
    ProviderQuery,
    QueryCard,
    QueryState,
)
from service.workspace.providers._common import (
    UNEXPECTED_SHAPE,
    as_dict,
    check_card,
    dicts,
    failed,
    from_epoch,
    join_messages,
    sub,
    text,
)
from service.workspace.providers._gather import read_together
from service.workspace.providers._multipart import (
    BatchPart,
    encode_batch,
    new_boundary,
    parse_batch,
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
PROFILE_PATH = "/gmail/v1/users/me/profile"
BATCH_PATH = "/batch/gmail/v1"
MAX_RESULTS = 20
MAX_BATCH = 50  # Gmail takes 100 calls a batch but advises at most 50 (larger ones get limited)
DETAIL_FIELDS = "id,threadId,labelIds,snippet,internalDate,payload/headers"
UNREAD_TITLE = "(message details unavailable)"
MISSING_PART = "Gmail's batch answer left it out"
GARBLED_PART = "provider returned a garbled batch part"
NAMED_FAILURES = 3  # message ids named per failure reason in a page message


# A read outcome: the message's JSON, None when it is gone (404), or why it could not be read.
Outcome = dict[str, Any] | ProviderError | None


# ---- requests -------------------------------------------------------------------------------


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


def detail_target(message_id: str) -> str:
    """The path and query of one `messages.get` call inside a batch."""
    return f"{LIST_PATH}/{quote(message_id, safe='')}?{_DETAIL_QUERY}"


# The query of `detail_request`, the same for every message: encoded once.
_DETAIL_QUERY = urlencode(detail_request("")[1], doseq=True, quote_via=quote)


# ---- part outcomes --------------------------------------------------------------------------


def part_error(part: BatchPart, *, now: float) -> ProviderError:
    """The error a part that is neither 2xx nor 404 answered, mapped like a whole answer
    (`status_error`: 429 and 403 rate-limit reasons RATE_LIMITED, 5xx retryable)."""
    mapped = None
    if part.status:
        mapped = status_error(
            part.status, part.headers, now=now, provider=ProviderId.GMAIL, body=part.body
        )
    return mapped or _garbled()


def _garbled() -> ProviderError:
    return ProviderError(QueryState.FAILED, GARBLED_PART, retryable=True)


def part_outcome(part: BatchPart, *, now: float) -> Outcome:
    """The message's JSON, None when it is gone (404), or the error the part answered."""
    if part.status == 404:
        return None
    if not 200 <= part.status < 300:
        return part_error(part, now=now)
    try:
        data = loads(part.body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return _garbled()
    return data if isinstance(data, dict) else _garbled()


def match_parts(content_ids: Sequence[str], parts: Sequence[BatchPart]) -> list[BatchPart | None]:
    """The part answering each request, by Content-ID (by position when the answer has none)."""
    if parts and not any(p.content_id for p in parts) and len(parts) == len(content_ids):
        return list(parts)
    by_id = {part.content_id: part for part in parts}
    return [by_id.get(content_id) for content_id in content_ids]


def refuses_token(parts: Sequence[BatchPart]) -> bool:
    """True when a part refused the access token (401), as an expired token does."""
    return any(part.status == 401 for part in parts)


async def _read_batch(http: HttpClient, ids: Sequence[str]) -> dict[str, Outcome]:
    boundary = new_boundary()
    calls = [(f"m{index}", detail_target(mid)) for index, mid in enumerate(ids)]
    parsed: list[tuple[RawResponse, list[BatchPart]]] = []  # holds the answers: no id reuse

    def refused(answer: RawResponse) -> bool:
        parsed.append((answer, parse_batch(answer.headers.get("content-type", ""), answer.body)))
        return refuses_token(parsed[-1][1])

    # A part's 401 renews a renewable token and sends the batch once more, as a 401 to the
    # batch request would (a refused token refuses every part; the resend reads them all).
    answer = await http.post_raw(
        BATCH_PATH,
        body=encode_batch(calls, boundary),
        content_type=f"multipart/mixed; boundary={boundary}",
        refused=refused,
    )
    if parsed and parsed[-1][0] is answer:
        parts = parsed[-1][1]
    else:
        parts = parse_batch(answer.headers.get("content-type", ""), answer.body)
    now = time.time()
    matched = match_parts([content_id for content_id, _ in calls], parts)
    return {
        mid: part_outcome(part, now=now)
        if part is not None
        else ProviderError(QueryState.FAILED, MISSING_PART, retryable=True)
        for mid, part in zip(ids, matched, strict=True)
    }


async def read_metadata(http: HttpClient, ids: Sequence[str]) -> dict[str, Outcome]:
    """Every message's metadata outcome, `MAX_BATCH` reads per HTTP request.

    A batch request that fails becomes the outcome of each of its messages.
    """
    unique = list(dict.fromkeys(ids))
    outcomes: dict[str, Outcome] = {}
    for start in range(0, len(unique), MAX_BATCH):
        chunk = unique[start : start + MAX_BATCH]
        try:
            outcomes.update(await _read_batch(http, chunk))
        except ProviderError as error:
            outcomes.update(dict.fromkeys(chunk, error))
    return outcomes


# ---- documents ------------------------------------------------------------------------------


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


def parse_profile(data: Any) -> str:
    """The mailbox address of a `users.getProfile` answer."""
    address = text(as_dict(data).get("emailAddress")).strip()
    if not address:
        raise failed(UNEXPECTED_SHAPE)
    return address


async def mailbox_address(http: HttpClient) -> str:
    """The searched account's address, read once per account (memo) and shared by calls."""
    return parse_profile(await http.get_json_memo(PROFILE_PATH))


def message_url(message_id: str, address: str) -> str:
    """The Gmail web link of a message in the account searched (also its fusion identity)."""
    account = _quoted_address(address)
    return f"https://mail.google.com/mail/?authuser={account}#all/{quote(message_id, safe='')}"


@functools.lru_cache(maxsize=1024)
def _quoted_address(address: str) -> str:
    """The `authuser` value of an address (the same for every message of an account)."""
    return quote(address, safe="@")


def stub(message_id: str, address: str) -> NativeDocument:
    """A listed message before its metadata is read (see `hydrate`)."""
    return NativeDocument(
        id=message_id,
        title=UNREAD_TITLE,
        url=message_url(message_id, address),
        kind="message",
        stub=True,
    )


def parse_message(data: Any, address: str) -> NativeDocument:
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
        url=message_url(message_id, address),
        content=html.unescape(text(body.get("snippet"))),
        kind="message",
        container=text(body.get("threadId")),
        author=headers.get("from", ""),
        modified_at=from_epoch(body.get("internalDate"), millis=True),
    )


def _named(ids: Sequence[str]) -> str:
    if len(ids) == 1:
        return f"message {ids[0]}"
    more = len(ids) - NAMED_FAILURES
    shown = ", ".join(ids[:NAMED_FAILURES])
    return f"messages {shown} and {more} more" if more > 0 else f"messages {shown}"


def failure_message(errors: Sequence[tuple[str, ProviderError]]) -> str:
    """One sentence per failure reason, naming a few of the messages it hit."""
    by_reason: dict[str, list[str]] = {}
    for message_id, error in errors:
        by_reason.setdefault(error.message, []).append(message_id)
    return join_messages(f"{_named(ids)} failed: {why}" for why, ids in by_reason.items())


def metadata_page(
    ids: Sequence[str],
    outcomes: Mapping[str, Outcome],
    address: str,
    *,
    next_cursor: str | None,
    total: int | None,
) -> ProviderPage:
    """The listed messages that were read, in listing order; failed reads make it partial.

    Gone (404) messages are dropped. A retryable failure leaves the page incomplete, so it is
    read again (and the message retried) on the next page; when every read failed, the worst
    error is raised instead (a retryable one, with the longest wait, first).
    """
    unique = list(dict.fromkeys(ids))
    documents: list[NativeDocument] = []
    errors: list[tuple[str, ProviderError]] = []
    for message_id in unique:
        outcome = outcomes.get(message_id, failed(MISSING_PART))
        if isinstance(outcome, ProviderError):
            errors.append((message_id, outcome))
        elif outcome is not None:
            try:
                document = parse_message(outcome, address)
            except ProviderError as error:
                errors.append((message_id, error))
                continue
            if document.id:
                documents.append(document)
    if unique and len(errors) == len(unique):
        retryable = [error for _, error in errors if error.retryable]
        raise max(retryable, key=lambda e: e.retry_after or 0.0) if retryable else errors[0][1]
    waits = [error.retry_after for _, error in errors if error.retry_after is not None]
    return ProviderPage(
        tuple(documents),
        next_cursor=next_cursor,
        total=total,
        total_is_exact=False,
        partial=bool(errors),
        message=failure_message(errors),
        complete=not any(error.retryable for _, error in errors),
        retry_after=max(waits) if waits else None,
    )


# ---- searching ------------------------------------------------------------------------------


async def search(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """List matching messages, then read their metadata in one batch request."""
    address = await mailbox_address(http)
    path, params = build_request(query)
    ids, next_token, estimate = parse_list(await http.get_json(path, params=params))
    outcomes = await read_metadata(http, ids) if ids else {}
    return metadata_page(ids, outcomes, address, next_cursor=next_token, total=estimate)


async def search_ids(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """`messages.list` only: message stubs, whose metadata `hydrate` reads once emitted.

    Fused pages show a few of the listed messages, so reading every one's metadata up front
    is mostly wasted quota; the engine uses this when no time range must be rechecked
    against each message's date.
    """
    address = await mailbox_address(http)
    path, params = build_request(query)
    ids, next_token, estimate = parse_list(await http.get_json(path, params=params))
    return ProviderPage(
        tuple(stub(mid, address) for mid in ids),
        next_cursor=next_token,
        total=estimate,
        total_is_exact=False,
    )


async def hydrate(http: HttpClient, document: NativeDocument) -> NativeDocument:
    """The message behind a stub, with subject, sender, snippet and date (batched reads)."""
    outcome = await read_together(http, document.id, read_metadata)
    if outcome is None:
        raise ProviderError(
            QueryState.FAILED, "the message was deleted after it was listed", retryable=False,
            gone=True,
        )
    full = parse_message(outcome, "")
    if full.id != document.id:
        return document
    return structs.replace(full, url=document.url)  # the stub's link, its identity
