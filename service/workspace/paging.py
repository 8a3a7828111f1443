"""Resume state of workspace search: signed page tokens and per-query cursors.

Every (query, account) result list is read in provider pages of a fixed size. Resuming is by
identity, never by position: a list resumes by reading again the provider page that held its
first result not yet emitted (or a page that failed in part), and every result of that read
not yet emitted is a candidate, wherever it now sits; what was emitted is known by id. A
page token keeps every list's resume point, named by its (query, account) so accounts may
come and go between pages, plus the short ids of the fused results already
emitted (the most recent ones when they do not all fit); a per-query cursor keeps one list's
resume point plus the ids of its own results already emitted (at most MAX_CURSOR_SEEN).

Providers move items between calls, so reaching a list's end is not the end: unless the list
was read from its first page to its end within one call, it is read again from the first
page (a sweep, `Pass.SWEEP`), and only a sweep that reaches the end with every result it saw
emitted ends the list. A sweep that the request budget or deadline cuts before the end
continues where it stopped (`Pass.LONG_SWEEP`); its end is final.
"""

from __future__ import annotations

import base64
import enum
import functools
import hashlib
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import structs

from service.errors import InvalidPageToken, ResourceExhausted
from service.ranking.tokens import MAX_TOKEN_CHARS, TokenSigner, fingerprint
from service.timerange import TimeRange
from service.workspace.model import Kind, ProviderId

__all__ = [
    "CURSOR_KIND",
    "MAX_CURSOR_CHARS",
    "MAX_CURSOR_SEEN",
    "MAX_PAGE_TOKEN_CHARS",
    "PAGE_TOKEN_KIND",
    "FetchedPage",
    "ListKey",
    "ListState",
    "PageState",
    "Pass",
    "ReadPass",
    "cursor_account",
    "cursor_binding",
    "decode_cursor",
    "decode_page_token",
    "encode_cursor",
    "encode_page_token",
    "page_binding",
    "recent",
    "resume_state",
    "short_id",
]

PAGE_TOKEN_KIND = "ws-page"  # noqa: S105 - a token kind label, not a secret
CURSOR_KIND = "ws-cursor"
MAX_CURSOR_CHARS = 4000
# A page token carries every list's resume point, whatever their number (a search reaches up
# to four lists per account, each with the provider's page token: Drive's, Calendar's and
# Jira's run to 100-250 characters), and as many emitted ids as fit in MAX_TOKEN_CHARS
# beside them. Lists that need more than this are refused, never dropped.
MAX_PAGE_TOKEN_CHARS = 1024 * 1024
MAX_CURSOR_SEEN = 200  # beyond this a cursor may repeat its oldest results rather than grow
_MAX_WIRE = 16  # elements of a list state on the wire (see ListState.from_wire)
_SHORT_BYTES = 6
_SHORT_CHARS = 8  # base64url of 6 bytes, no padding


def short_id(key: str) -> str:
    """An 8-character digest of a fused result's identity, as kept in tokens."""
    digest = hashlib.blake2b(key.encode(), digest_size=_SHORT_BYTES).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")


def _pack(ids: Iterable[str]) -> str:
    return "".join(ids)


def _unpack(packed: Any, field_name: str) -> tuple[str, ...]:
    if not isinstance(packed, str) or len(packed) % _SHORT_CHARS:
        raise InvalidPageToken.field(field_name, "token is malformed")
    return tuple(packed[i : i + _SHORT_CHARS] for i in range(0, len(packed), _SHORT_CHARS))


def recent(ids: Sequence[str], limit: int) -> tuple[str, ...]:
    """The last `limit` distinct ids, in order (older ones are forgotten first)."""
    kept = list(dict.fromkeys(ids))
    return tuple(kept[-limit:]) if limit > 0 else ()


class Pass(enum.IntEnum):
    """Which read of a list is under way."""

    FIRST = 0  # reading forward from the first page
    SWEEP = 1  # the end was reached once: every call reads again from the first page
    LONG_SWEEP = 2  # a sweep cut by budget or deadline: continues where it stopped


class ListState(msgspec.Struct, frozen=True):
    """Where one (query, account) list resumes."""

    cursor: str | None = None  # provider cursor of the page read first; None = first page
    offset: int = 0  # results before that page (the rank of its first result - 1)
    limit: int = 10  # provider page size; provider cursors depend on it
    exhausted: bool = False
    emitted: int = 0  # results this list contributed to emitted fused results so far
    sweep: Pass = Pass.FIRST
    wait_until: int = 0  # unix seconds: a rate-limited list is not read again before this
    seen: tuple[str, ...] = ()  # cursors: ids of the list's emitted results
    failures: int = 0  # consecutive calls in which every read of the list failed
    failing_since: int = 0  # unix seconds of the first of those failures
    # Consecutive calls whose deadline ran out before any read of the list completed: the
    # next call reads the accounts furthest behind first, so none waits forever.
    behind: int = 0
    # Times in a row the provider refused a page token the list resumed with (expired) and
    # the list was read again from its first page with no result of it emitted since:
    # bounded, so a provider that keeps refusing cannot keep a search re-reading its pages.
    restarts: int = 0
    # The provider refused the account's credentials: the list keeps its place and is not read
    # again while the account is flagged NEEDS_RECONNECT; once it is reconnected
    # (UpdateAccountCredentials), a later page or the list's cursor resumes it from here.
    parked: bool = False
    # First-pass provider pages read since the list last contributed a result: a provider
    # whose paging never ends (a cursor cycle, empty pages without end) is stopped by it.
    idle: int = 0
    # An exhausted list that ended on a failure (a refused query, given up, broken paging),
    # not at its end: later pages still report it FAILED, not "no more results".
    failed: bool = False

    @property
    def at_first_page(self) -> bool:
        """True when the list is read from its first page."""
        return self.cursor is None and self.offset == 0

    def to_wire(self) -> list[Any]:
        """Compact JSON form (without `seen`): the later fields only up to the last one that
        is set, so tokens without them stay as short as before they existed (the failure
        streak travels as a pair)."""
        wire = [self.cursor, self.offset, self.limit, int(self.exhausted), self.emitted,
                int(self.sweep), self.wait_until]
        later = [self.failures, self.failing_since, self.behind, self.restarts,
                 int(self.parked), self.idle, int(self.failed)]
        while len(later) > 2 and not later[-1]:
            later.pop()
        return [*wire, *later] if any(later) else wire

    @classmethod
    def from_wire(cls, value: Any, field_name: str) -> ListState:
        """Parse `to_wire` output; InvalidPageToken naming `field_name` when malformed.

        Elements past the ones known here are ignored (up to _MAX_WIRE): a field a later
        version appends reads as its default, so its tokens still resume on this one during
        a rolling upgrade."""
        if not isinstance(value, list) or not 7 <= len(value) <= _MAX_WIRE or len(value) == 8:
            raise InvalidPageToken.field(field_name, "token is malformed")
        cursor, offset, limit, exhausted, emitted, sweep, wait_until = value[:7]
        failures, since, behind, restarts, parked, idle, failed = [*value[7:14], *[0] * 7][:7]
        numbers = (offset, limit, emitted, sweep, wait_until, failures, since, behind, restarts,
                   parked, idle, failed)
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidPageToken.field(field_name, "token is malformed")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
            raise InvalidPageToken.field(field_name, "token is malformed")
        if (exhausted not in (0, 1) or parked not in (0, 1) or failed not in (0, 1)
                or not 1 <= limit <= 100 or sweep not in iter(Pass)):
            raise InvalidPageToken.field(field_name, "token is malformed")
        return cls(cursor, offset, limit, bool(exhausted), emitted, Pass(sweep), wait_until,
                   failures=failures, failing_since=since, behind=behind, restarts=restarts,
                   parked=bool(parked), idle=idle, failed=bool(failed))


ListKey = tuple[int, str]  # (query_index, account_id): one list of a search


@dataclass(frozen=True)
class PageState:
    """Everything the next fused page needs: each list's resume point and what was emitted."""

    lists: tuple[ListState, ...]
    emitted: tuple[str, ...]  # short ids, in the order they were emitted
    page_number: int  # 1-based number of the next page
    # (query_index, account_id) of each list, in the order of `lists`. Lists resume by
    # name, not by position: an account connected or disconnected between pages leaves
    # every other list where it was.
    keys: tuple[ListKey, ...]
    # The RRF k the search began with: its pages keep it, whatever SEARCH_RRF_K becomes
    # (0: a token from before tokens carried it, bound to the k configured now).
    rrf_k: int = 0

    @functools.cached_property
    def _by_key(self) -> dict[ListKey, ListState]:
        return dict(zip(self.keys, self.lists, strict=True))

    def resume_of(self, key: ListKey) -> ListState | None:
        """Where the list `key` resumes; None when the token has no such list (its account
        was connected after the token was issued: it starts from its first page)."""
        return self._by_key.get(key)


class FetchedPage(msgspec.Struct, frozen=True):
    """One provider page of a list as fetched in this call (results after the date recheck)."""

    cursor: str | None  # the cursor that fetched it
    offset: int  # results before it in the list
    ids: tuple[str, ...]  # short ids of its results, in order
    next_cursor: str | None  # None: the list ends with this page
    complete: bool = True  # False: a part failed; the page is read again


class ReadPass(msgspec.Struct, frozen=True):
    """What one call read of a list's current pass, for `resume_state`."""

    start: ListState  # where this call's reading of the pass began
    pages: tuple[FetchedPage, ...]  # pages of the pass fetched in this call, in order
    sweep: Pass  # the pass being read
    cut: bool = False  # budget or deadline stopped the pass before its end
    ended: bool = False  # a fetch failed for good: the list ends
    found: bool = False  # a sweep read a result that was not emitted before it

    @property
    def snapshot(self) -> bool:
        """The pass is the whole list as one provider answer (its first page, the last): the
        only reading of a list no change can have slipped into. Between two pages, even of
        one call, items are deleted and added, and a result can move onto a page already
        read."""
        return self.start.at_first_page and len(self.pages) == 1

    @property
    def final(self) -> bool:
        """An end this pass reaches ends the list: it is one provider answer, a sweep that
        found nothing new, or a long sweep (whose end is taken as it is)."""
        return (self.snapshot or self.sweep is Pass.LONG_SWEEP
                or (self.sweep is Pass.SWEEP and not self.found))


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
    return _cursor_binding(
        tenant, provider.value, account_id, text, kind.value if kind else None,
        time_range.start.isoformat() if time_range.start else None,
        time_range.end.isoformat() if time_range.end else None,
        project,
    )


@functools.lru_cache(maxsize=4096)
def _cursor_binding(
    tenant: str, provider: str, account_id: str, text: str, kind: str | None, start: str | None,
    end: str | None, project: str,
) -> str:
    """cursor_binding of the wire spellings (cached: the same queries come back call after
    call, and each costs a canonical JSON dump and a digest)."""
    return fingerprint(CURSOR_KIND, tenant, provider, account_id, text, kind, [start, end],
                       project)


def _overflow(length: int, limit: int) -> int:
    """How many of the oldest ids to drop so a token of `length` characters fits `limit`:
    each id is 8 payload characters, about 10.7 once the payload is base64url-encoded."""
    return max(1, -(-(length - limit) * 3 // 32) + 1)


def encode_page_token(signer: TokenSigner, binding: str, state: PageState) -> str:
    """A signed page token for `state`.

    Every list's resume point travels. Emitted ids are kept newest first, in at most
    MAX_TOKEN_CHARS beside the lists: past that the oldest are forgotten (a later sweep may
    then emit one of those again: a repeat, never a skip). Lists that do not fit in
    MAX_PAGE_TOKEN_CHARS raise ResourceExhausted (PAGE_TOKEN_TOO_LARGE): a page never says
    nothing is left because its continuation was too large.
    """
    lists = [item.to_wire() for item in state.lists]

    def sign(ids: Sequence[str]) -> str:
        return signer.sign(PAGE_TOKEN_KIND, binding, {
            "l": lists, "k": [list(key) for key in state.keys], "e": _pack(ids),
            "p": state.page_number, "r": state.rrf_k,
        })

    token = sign(state.emitted)
    if len(token) <= MAX_TOKEN_CHARS:
        return token  # the common case: ids and lists within MAX_TOKEN_CHARS together
    bare = sign(())
    if len(bare) > MAX_PAGE_TOKEN_CHARS:
        raise ResourceExhausted(
            f"this search's continuation ({len(state.lists)} lists) needs a page token of "
            f"{len(bare)} characters, over {MAX_PAGE_TOKEN_CHARS}: give queries an account_id "
            "or send fewer queries",
            reason="PAGE_TOKEN_TOO_LARGE",
            metadata={"limit": str(MAX_PAGE_TOKEN_CHARS), "lists": str(len(state.lists))},
        )
    limit = len(bare) + MAX_TOKEN_CHARS
    ids = state.emitted
    while len(token) > limit and ids:
        ids = ids[_overflow(len(token), limit) :]
        token = sign(ids)
    return token


def decode_page_token(
    signer: TokenSigner, binding: str, token: str, keys: Sequence[ListKey],
    legacy: Callable[[], str] | None = None,
) -> PageState:
    """The state of a page token issued for this request; InvalidPageToken otherwise.

    `keys` name the request's lists as they are now. `legacy` gives the binding of tokens
    issued before lists had names (bound to the same lists in the same order, so `keys` name
    them), tried only when `binding` fails: tokens in flight across an upgrade go on.
    """
    limit = MAX_PAGE_TOKEN_CHARS + MAX_TOKEN_CHARS
    try:
        payload = signer.verify(token, PAGE_TOKEN_KIND, binding, field="page_token",
                                limit=limit)
        named = _list_keys(payload.get("k"))
    except InvalidPageToken:
        if legacy is None:
            raise
        payload = signer.verify(token, PAGE_TOKEN_KIND, legacy(), field="page_token",
                                limit=limit)
        named = tuple(keys)
    raw_lists = payload.get("l")
    page = payload.get("p")
    if not isinstance(raw_lists, list) or len(raw_lists) != len(named):
        raise InvalidPageToken.field("page_token", "token is malformed")
    if not isinstance(page, int) or isinstance(page, bool) or page < 1:
        raise InvalidPageToken.field("page_token", "token is malformed")
    k = payload.get("r", 0)
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise InvalidPageToken.field("page_token", "token is malformed")
    states = tuple(ListState.from_wire(item, "page_token") for item in raw_lists)
    return PageState(states, _unpack(payload.get("e"), "page_token"), page, named, k)


def _list_keys(raw: Any) -> tuple[ListKey, ...]:
    """The `k` of a page token: distinct [query_index, account_id] pairs."""
    if not isinstance(raw, list):
        raise InvalidPageToken.field("page_token", "token is malformed")
    keys: list[ListKey] = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int)
                and not isinstance(item[0], bool) and item[0] >= 0 and isinstance(item[1], str)):
            raise InvalidPageToken.field("page_token", "token is malformed")
        keys.append((item[0], item[1]))
    if len(set(keys)) != len(keys):
        raise InvalidPageToken.field("page_token", "token is malformed")
    return tuple(keys)


def encode_cursor(signer: TokenSigner, binding: str, state: ListState, account_id: str) -> str:
    """A signed per-query cursor for `state` on `account_id`; '' when the list is exhausted.
    It names its account, so a cursor whose account was disconnected since can say so."""
    if state.exhausted:
        return ""
    seen = recent(state.seen, MAX_CURSOR_SEEN)
    while True:
        cursor = signer.sign(CURSOR_KIND, binding,
                             {"l": state.to_wire(), "s": _pack(seen), "a": account_id})
        if len(cursor) <= MAX_CURSOR_CHARS or not seen:
            return cursor  # a provider cursor too long even alone is refused on decode
        seen = seen[_overflow(len(cursor), MAX_CURSOR_CHARS) :]


def cursor_account(signer: TokenSigner, cursor: str) -> str:
    """The account a cursor names ('' for none), unverified: only a hint of which binding to
    verify it with."""
    named = signer.peek(cursor).get("a")
    return named if isinstance(named, str) else ""


def decode_cursor(signer: TokenSigner, binding: str, cursor: str, field_name: str) -> ListState:
    """The state of a cursor issued for this query and account; InvalidPageToken otherwise."""
    if len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidPageToken.field(field_name, "cursor is too long")
    payload = signer.verify(cursor, CURSOR_KIND, binding, field=field_name)
    state = ListState.from_wire(payload.get("l"), field_name)
    return structs.replace(state, seen=_unpack(payload.get("s"), field_name))


def _first_open(pages: Sequence[FetchedPage], emitted: Collection[str]) -> int | None:
    """Index of the first page that failed in part or holds a result not yet emitted."""
    for index, page in enumerate(pages):
        if not page.complete or any(item not in emitted for item in page.ids):
            return index
    return None


def resume_state(read: ReadPass, emitted: Collection[str], contributed: int) -> ListState:
    """Where the list resumes after this call.

    `read` is what this call read of the list's current pass; `emitted` holds every short id
    known to be emitted (the fused results and, for cursors, the list's own); `contributed`
    is the list's result count so far.
    """
    start, pages = read.start, read.pages
    base = structs.replace(start, emitted=contributed, seen=(), wait_until=0)
    if read.ended:
        return structs.replace(base, exhausted=True)
    if not pages:
        return structs.replace(base, sweep=read.sweep)
    reached_end = pages[-1].next_cursor is None
    first_open = _first_open(pages, emitted)
    if read.sweep is Pass.SWEEP:
        if reached_end and first_open is None and read.final:
            return structs.replace(base, exhausted=True)
        if read.cut and first_open is None:  # too long to sweep in one call: go on from here
            last = pages[-1]
            return ListState(last.next_cursor, last.offset + len(last.ids), start.limit, False,
                             contributed, Pass.LONG_SWEEP)
        return ListState(None, 0, start.limit, False, contributed, Pass.SWEEP)
    if first_open is not None:
        page = pages[first_open]
        return ListState(page.cursor, page.offset, start.limit, False, contributed, read.sweep)
    last = pages[-1]
    end = last.offset + len(last.ids)
    if not reached_end:
        return ListState(last.next_cursor, end, start.limit, False, contributed, read.sweep)
    if read.final:
        return ListState(None, end, start.limit, True, contributed, read.sweep)
    return ListState(None, 0, start.limit, False, contributed, Pass.SWEEP)
