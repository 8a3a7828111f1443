"""Resume state of workspace search: signed page tokens and per-query cursors.

Every (query, account) result list is read in provider pages of a fixed size. Its resume
point is the provider page holding the first result not yet emitted: the cursor that fetches
that page, how many of its leading results were emitted, and the rank offset of its first
result, so ranks stay absolute across calls. A page token keeps that for every list plus the
short ids of every fused result already emitted (nothing repeats); a per-query cursor keeps it
for one list plus the short ids of its own results emitted beyond the resume point.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from service.errors import InvalidPageToken
from service.ranking.tokens import TokenSigner, fingerprint
from service.timerange import TimeRange
from service.workspace.model import Kind, ProviderId

__all__ = [
    "CURSOR_KIND",
    "MAX_CURSOR_CHARS",
    "PAGE_TOKEN_KIND",
    "FetchedPage",
    "ListState",
    "PageState",
    "cursor_binding",
    "decode_cursor",
    "decode_page_token",
    "encode_cursor",
    "encode_page_token",
    "page_binding",
    "resume_state",
    "short_id",
]

PAGE_TOKEN_KIND = "ws-page"  # noqa: S105 - a token kind label, not a secret
CURSOR_KIND = "ws-cursor"
MAX_CURSOR_CHARS = 4000
MAX_CURSOR_SEEN = 200  # beyond this a cursor may repeat a few results rather than grow
_SHORT_BYTES = 6
_SHORT_CHARS = 8  # base64url of 6 bytes, no padding


def short_id(key: str) -> str:
    """An 8-character digest of a fused result's identity, as kept in tokens."""
    digest = hashlib.blake2b(key.encode(), digest_size=_SHORT_BYTES).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")


def _pack(ids: Collection[str]) -> str:
    return "".join(sorted(ids))


def _unpack(packed: Any, field_name: str) -> frozenset[str]:
    if not isinstance(packed, str) or len(packed) % _SHORT_CHARS:
        raise InvalidPageToken.field(field_name, "token is malformed")
    return frozenset(
        packed[i : i + _SHORT_CHARS] for i in range(0, len(packed), _SHORT_CHARS)
    )


@dataclass(frozen=True)
class ListState:
    """Where one (query, account) list resumes."""

    cursor: str | None = None  # provider cursor fetching the resume page; None = first page
    skip: int = 0  # leading results of that page already emitted
    offset: int = 0  # results before that page (the rank of its first result - 1)
    limit: int = 10  # provider page size; provider cursors depend on it
    exhausted: bool = False
    emitted: int = 0  # results this list contributed to emitted fused results so far
    seen: frozenset[str] = field(default=frozenset())  # cursors: own results emitted past skip

    def to_wire(self) -> list[Any]:
        """Compact JSON form (without `seen`)."""
        return [self.cursor, self.skip, self.offset, self.limit, int(self.exhausted), self.emitted]

    @classmethod
    def from_wire(cls, value: Any, field_name: str) -> ListState:
        """Parse `to_wire` output; InvalidPageToken naming `field_name` when malformed."""
        if not isinstance(value, list) or len(value) != 6:
            raise InvalidPageToken.field(field_name, "token is malformed")
        cursor, skip, offset, limit, exhausted, emitted = value
        numbers = (skip, offset, limit, emitted)
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidPageToken.field(field_name, "token is malformed")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
            raise InvalidPageToken.field(field_name, "token is malformed")
        if exhausted not in (0, 1) or not 1 <= limit <= 100:
            raise InvalidPageToken.field(field_name, "token is malformed")
        return cls(cursor, skip, offset, limit, bool(exhausted), emitted)


@dataclass(frozen=True)
class PageState:
    """Everything the next fused page needs: each list's resume point and what was emitted."""

    lists: tuple[ListState, ...]
    emitted: frozenset[str]
    page_number: int  # 1-based number of the next page


@dataclass(frozen=True)
class FetchedPage:
    """One provider page of a list as fetched in this call (results after the date recheck)."""

    cursor: str | None  # the cursor that fetched it
    offset: int  # results before it in the list
    ids: tuple[str, ...]  # short ids of its results, in order
    next_cursor: str | None  # None: the list ends with this page


def page_binding(tenant: str, request_fingerprint: str) -> str:
    """What a page token is bound to: the tenant and the request's fingerprint."""
    return fingerprint(PAGE_TOKEN_KIND, tenant, request_fingerprint)


def cursor_binding(
    tenant: str,
    provider: ProviderId,
    account_id: str,
    text: str,
    kind: Kind | None,
    time_range: TimeRange,
    project: str,
) -> str:
    """What a per-query cursor is bound to."""
    bounds = [
        time_range.start.isoformat() if time_range.start else None,
        time_range.end.isoformat() if time_range.end else None,
    ]
    kind_value = kind.value if kind else None
    return fingerprint(CURSOR_KIND, tenant, provider.value, account_id, text, kind_value, bounds,
                       project)


def encode_page_token(signer: TokenSigner, binding: str, state: PageState) -> str:
    """A signed page token for `state`."""
    payload = {
        "l": [item.to_wire() for item in state.lists],
        "e": _pack(state.emitted),
        "p": state.page_number,
    }
    return signer.sign(PAGE_TOKEN_KIND, binding, payload)


def decode_page_token(signer: TokenSigner, binding: str, token: str, lists: int) -> PageState:
    """The state of a page token issued for this request; InvalidPageToken otherwise."""
    payload = signer.verify(token, PAGE_TOKEN_KIND, binding, field="page_token")
    raw_lists = payload.get("l")
    page = payload.get("p")
    if not isinstance(raw_lists, list) or len(raw_lists) != lists:
        raise InvalidPageToken.field("page_token", "token is malformed")
    if not isinstance(page, int) or isinstance(page, bool) or page < 1:
        raise InvalidPageToken.field("page_token", "token is malformed")
    states = tuple(ListState.from_wire(item, "page_token") for item in raw_lists)
    return PageState(states, _unpack(payload.get("e"), "page_token"), page)


def encode_cursor(signer: TokenSigner, binding: str, state: ListState) -> str:
    """A signed per-query cursor for `state`; '' when the list is exhausted."""
    if state.exhausted:
        return ""
    seen = sorted(state.seen)[:MAX_CURSOR_SEEN]
    cursor = signer.sign(CURSOR_KIND, binding, {"l": state.to_wire(), "s": _pack(seen)})
    if len(cursor) > MAX_CURSOR_CHARS:  # a long provider cursor: repeat a few, never skip
        cursor = signer.sign(CURSOR_KIND, binding, {"l": state.to_wire(), "s": ""})
    return cursor


def decode_cursor(signer: TokenSigner, binding: str, cursor: str, field_name: str) -> ListState:
    """The state of a cursor issued for this query and account; InvalidPageToken otherwise."""
    if len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidPageToken.field(field_name, "cursor is too long")
    payload = signer.verify(cursor, CURSOR_KIND, binding, field=field_name)
    state = ListState.from_wire(payload.get("l"), field_name)
    return replace(state, seen=_unpack(payload.get("s"), field_name))


def _done(
    page_index: int, position: int, item: str, start: ListState, emitted: Collection[str]
) -> bool:
    if page_index == 0 and position < start.skip:
        return True
    return item in emitted or item in start.seen


def resume_state(
    start: ListState, pages: Sequence[FetchedPage], emitted: Collection[str], contributed: int
) -> ListState:
    """Where the list resumes after this call: at the first fetched result not yet emitted.

    `pages` are the provider pages fetched in this call, the first one at `start.cursor`;
    `emitted` holds the short ids emitted so far; `contributed` is the list's result count.
    """
    first: tuple[int, int] | None = None
    seen: list[str] = []
    for page_index, page in enumerate(pages):
        for position, item in enumerate(page.ids):
            done = _done(page_index, position, item, start, emitted)
            if first is None and not done:
                first = (page_index, position)
            elif first is not None and done:
                seen.append(item)
    if first is not None:
        page = pages[first[0]]
        return ListState(page.cursor, first[1], page.offset, start.limit, False, contributed,
                         frozenset(seen))
    if not pages:
        return replace(start, emitted=contributed)
    last = pages[-1]
    end = last.offset + len(last.ids)
    if last.next_cursor is None:
        return ListState(None, 0, end, start.limit, True, contributed)
    return ListState(last.next_cursor, 0, end, start.limit, False, contributed)
