"""Validation of a workspace search and its expansion into (query, account) slots.

Every rule breaks the whole request (INVALID_ARGUMENT) with one field violation per offending
query, or on the request field (`queries`, `top_k`, ...) for its shape: a request that can
never succeed is never RESOURCE_EXHAUSTED, which backing-off clients would retry. An
`account_id` the caller does not own is reported like a malformed one
(`queries[i].account_id`: unknown account), which reveals nothing about other tenants.

Only what cannot work or repeats work is refused: duplicates are queries with the same
provider, text, kind, project and time range whose account sets overlap, their text compared
exactly unless the provider ignores case (`ProviderSpec.text_ignores_case`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec
from msgspec import structs

from service.errors import (
    FieldViolation,
    InvalidArgument,
    InvalidPageToken,
    ServiceError,
)
from service.ranking.rrf import RRF_VERSION
from service.ranking.tokens import TokenSigner, fingerprint
from service.timerange import TimeRange
from service.workspace.model import Account, Kind, ProviderId
from service.workspace.paging import (
    ListKey,
    ListState,
    PageState,
    cursor_account,
    cursor_binding,
    decode_cursor,
    decode_page_token,
    page_binding,
)
from service.workspace.providers import ProviderSpec

__all__ = ["Limits", "NativeQuery", "Plan", "SearchRequest", "Slot", "build_plan", "normalise"]

_WHITESPACE = re.compile(r"\s+")
_KINDED = frozenset({ProviderId.GITHUB, ProviderId.GITLAB})
TOKEN_REASON = InvalidPageToken.reason


class NativeQuery(msgspec.Struct, frozen=True):
    """One native query as the caller sent it (provider None: unspecified or unknown)."""

    provider: ProviderId | None
    text: str = ""
    account_id: str = ""
    kind: Kind | None = None
    time_range: TimeRange = msgspec.field(default_factory=TimeRange)
    project: str = ""
    cursor: str = ""


@dataclass(frozen=True)
class SearchRequest:
    """A workspace search request (0 = default for `top_k` and `max_pages`)."""

    queries: tuple[NativeQuery, ...]
    top_k: int = 0
    page_token: str = ""
    max_pages: int = 0


@dataclass(frozen=True)
class Limits:
    """Request limits (see DESIGN.md section 4)."""

    max_queries: int = 32
    max_text_chars: int = 2000  # any query's whole text, whatever the provider counts
    per_account: int = 4
    default_top_k: int = 10
    max_top_k: int = 50
    max_pages: int = 10
    max_project_chars: int = 300
    max_cursor_chars: int = 4000
    rrf_k: int = 60


class Slot(msgspec.Struct, frozen=True):
    """One query on one account: one ranked result list."""

    index: int  # position in Plan.slots (the list index for fusion)
    query_index: int
    query: NativeQuery  # normalised: stripped text, kind None where the provider has no kinds
    account: Account
    start: ListState | None  # from the query's cursor

    @property
    def key(self) -> ListKey:
        """The list's name in page tokens."""
        return self.query_index, self.account.account_id


@dataclass(frozen=True)
class Plan:
    """A validated search: its slots, queries that reached no account, and resume state."""

    tenant: str
    top_k: int
    max_pages: int
    slots: tuple[Slot, ...]
    # (query_index, provider, account_id) of queries that reach no account (account_id '':
    # none of the provider is connected) and of lists whose account was disconnected after
    # the page token was issued
    unmatched: tuple[tuple[int, ProviderId, str], ...]
    binding: str  # what page tokens of this request are bound to
    resume: PageState | None  # decoded page token


def normalise(text: str) -> str:
    """Stripped text with runs of whitespace collapsed to one space."""
    return _WHITESPACE.sub(" ", text).strip()


class _Violations:
    def __init__(self) -> None:
        self.items: list[FieldViolation] = []
        self.bad_queries: set[int] = set()

    def add(self, index: int | None, path: str, description: str, reason: str = "") -> None:
        if index is not None:
            if index in self.bad_queries:
                return  # one violation per offending query
            self.bad_queries.add(index)
        self.items.append(FieldViolation(path, description, reason))

    def raise_if_any(self) -> None:
        if not self.items:
            return
        first = self.items[0]
        message = f"{first.field}: {first.description}"
        if len(self.items) > 1:
            message += f" (and {len(self.items) - 1} more)"
        if all(v.reason == TOKEN_REASON for v in self.items):
            raise InvalidPageToken(message, violations=self.items)
        raise InvalidArgument(message, violations=self.items)


def _text_problem(query: NativeQuery, spec: ProviderSpec, limits: Limits) -> str:
    """Why the query's text cannot work on its provider ('' when it can)."""
    if len(query.text) > limits.max_text_chars:
        return f"longer than {limits.max_text_chars} characters"
    text = normalise(query.text)
    if spec.text_length(text) > spec.max_text_length:
        # GitHub counts free text only: its qualifiers and operators are not search text.
        return f"more than {spec.max_text_length} characters of search text for {spec.id.value}"
    if not text and not query.time_range.is_set:
        return "empty text needs a time_range"
    if spec.check_text is None:
        return ""
    return spec.check_text(text, query.kind if spec.kinds else None)


def _check_query(
    query: NativeQuery, registry: Mapping[ProviderId, ProviderSpec], limits: Limits
) -> tuple[str, str] | None:
    """(field suffix, description) of the first problem of one query, or None."""
    spec = registry.get(query.provider) if query.provider else None
    if spec is None:
        return "provider", "unknown or missing provider"
    if query.kind is not None and spec.kinds and query.kind not in spec.kinds:
        return "kind", f"{spec.id.value} does not support kind {query.kind.value}"
    problem = _text_problem(query, spec, limits)
    if problem:
        return "text", problem
    tr = query.time_range
    if tr.start is not None and tr.end is not None and tr.start >= tr.end:
        return "time_range", "start_time must be before end_time"
    if len(query.project) > limits.max_project_chars:
        return "project", f"longer than {limits.max_project_chars} characters"
    if len(query.cursor) > limits.max_cursor_chars:
        return "cursor", f"longer than {limits.max_cursor_chars} characters"
    return None


def _normalised(query: NativeQuery, spec: ProviderSpec) -> NativeQuery:
    kind = query.kind if spec.kinds else None
    return structs.replace(
        query, text=normalise(query.text), kind=kind, project=query.project.strip()
    )


def _resolve(
    tenant: str, index: int, query: NativeQuery, accounts: Sequence[Account],
    signer: TokenSigner, violations: _Violations, continuing: bool,
) -> tuple[tuple[Account, ...], ListState | None, str] | None:
    """Target accounts of a query, its cursor state, and the id of its account when that was
    disconnected after the query's page token or cursor was issued ('' otherwise); None
    after recording a violation. `continuing`: the request has a page token, which is bound
    to the query, so an account_id it names was known when the token was issued."""
    assert query.provider is not None
    mine = tuple(a for a in accounts if a.provider is query.provider)
    if query.account_id:
        mine = tuple(a for a in mine if a.account_id == query.account_id)
        if not mine and (continuing or _cursor_for(tenant, query, query.account_id, signer)):
            return (), None, query.account_id  # the other queries go on
        if not mine:
            violations.add(index, f"queries[{index}].account_id", "unknown account")
            return None
    if not query.cursor:
        return mine, None, ""
    path = f"queries[{index}].cursor"
    error: ServiceError = InvalidPageToken.field(path, "cursor belongs to no account of this query")
    for account in mine:
        try:
            return (account,), _cursor_state(tenant, query, account.account_id, signer, path), ""
        except InvalidPageToken as failure:
            error = failure
    named = cursor_account(signer, query.cursor)
    if named and all(a.account_id != named for a in accounts) and _cursor_for(
        tenant, query, named, signer
    ):
        return (), None, named
    violations.add(index, path, error.violations[0].description, TOKEN_REASON)
    return None


def _cursor_state(
    tenant: str, query: NativeQuery, account_id: str, signer: TokenSigner, path: str
) -> ListState:
    """The state of the query's cursor when it was issued for `account_id`; InvalidPageToken
    naming `path` otherwise."""
    assert query.provider is not None
    binding = cursor_binding(tenant, query.provider, account_id, query.text, query.kind,
                             query.time_range, query.project)
    return decode_cursor(signer, binding, query.cursor, path)


def _cursor_for(tenant: str, query: NativeQuery, account_id: str, signer: TokenSigner) -> bool:
    """True when the query's cursor is valid for `account_id` (an account no longer here)."""
    if not query.cursor:
        return False
    try:
        _cursor_state(tenant, query, account_id, signer, "cursor")
    except InvalidPageToken:
        return False
    return True


class _Checked(msgspec.Struct, frozen=True):
    index: int
    provider: ProviderId
    query: NativeQuery
    targets: tuple[Account, ...]
    start: ListState | None
    gone: str  # its account, disconnected since its page token or cursor was issued
    same_as: tuple[object, ...]  # queries with equal keys on overlapping accounts are duplicates


def _dedupe_key(query: NativeQuery, spec: ProviderSpec) -> tuple[object, ...]:
    tr = query.time_range
    text = query.text.casefold() if spec.text_ignores_case else query.text
    return (query.provider, text, query.kind, query.project, tr.start, tr.end)


def _overlaps(a: _Checked, b: _Checked) -> bool:
    if a.provider is not b.provider:
        return False
    ids_a = {t.account_id for t in a.targets} if a.query.account_id or a.start or a.gone else None
    ids_b = {t.account_id for t in b.targets} if b.query.account_id or b.start or b.gone else None
    return ids_a is None or ids_b is None or bool(ids_a & ids_b)


def _kind_clash(item: _Checked, earlier: Sequence[_Checked]) -> bool:
    if item.provider not in _KINDED:
        return False
    for other in earlier:
        kinds = (item.query.kind, other.query.kind)
        if _overlaps(item, other) and (None in kinds or kinds[0] == kinds[1]):
            return True
    return False


def _load(item: _Checked, earlier: Sequence[_Checked]) -> int:
    """Queries already on the busiest account this query targets."""
    per_account: dict[str, int] = defaultdict(int)
    for other in earlier:
        if _overlaps(item, other):
            for account in other.targets:
                per_account[account.account_id] += 1
    untargeted = sum(1 for o in earlier if _overlaps(item, o) and not o.targets)
    return untargeted + max(per_account.values(), default=0)


def _cross_checks(checked: Sequence[_Checked], limits: Limits, violations: _Violations) -> None:
    """Duplicates, one query per kind (GitHub, GitLab) and the per-account cap, left to right."""
    # Queries of different providers never overlap: each is checked against its provider's.
    by_provider: dict[ProviderId, list[_Checked]] = {}
    for item in checked:
        i = item.index
        accepted = by_provider.setdefault(item.provider, [])
        if any(o.same_as == item.same_as and _overlaps(item, o) for o in accepted):
            violations.add(
                i, f"queries[{i}]",
                "duplicate query (same provider, text, kind, project and time range on an "
                "account an earlier query searches)",
            )
        elif _kind_clash(item, accepted):
            violations.add(
                i, f"queries[{i}].kind",
                "GitHub and GitLab take one query per kind per account, and a query without a "
                "kind excludes any other; join alternatives with OR (GitHub code search has "
                "no OR: search code alternatives in another call)",
            )
        elif _load(item, accepted) >= limits.per_account:
            violations.add(
                i, f"queries[{i}]",
                f"at most {limits.per_account} queries per account; a query without an "
                "account_id counts toward every account of its provider",
            )
        else:
            accepted.append(item)


def _top_level(request: SearchRequest, limits: Limits, violations: _Violations) -> None:
    if not request.queries:
        violations.add(None, "queries", "at least one query is required")
    if not 0 <= request.top_k <= limits.max_top_k:
        violations.add(None, "top_k", f"must be between 1 and {limits.max_top_k} (0 = default)")
    if not 0 <= request.max_pages <= limits.max_pages:
        violations.add(None, "max_pages", f"must be between 1 and {limits.max_pages} (0 = 1)")


def _fingerprint(top_k: int, limits: Limits, checked: Sequence[_Checked],
                 slots: Sequence[Slot] | None = None) -> str:
    """What a page token is bound to: the request, not the accounts it reaches (its lists
    are named in the token) nor the configured RRF k (the token carries the k its search
    began with). With `slots`: the binding of tokens issued before, which were bound to
    the lists and to the k too."""
    queries = [
        [c.index, c.provider.value, c.query.account_id, c.query.text,
         c.query.kind.value if c.query.kind else None, str(c.query.time_range.start),
         str(c.query.time_range.end), c.query.project, c.query.cursor]
        for c in checked
    ]
    if slots is None:
        return fingerprint(RRF_VERSION, top_k, queries)
    lists = [[s.query_index, s.account.account_id] for s in slots]
    return fingerprint(RRF_VERSION, limits.rrf_k, top_k, queries, lists)


def build_plan(
    tenant: str,
    request: SearchRequest,
    accounts: Sequence[Account],
    registry: Mapping[ProviderId, ProviderSpec],
    signer: TokenSigner,
    limits: Limits = Limits(),
) -> Plan:
    """Validate `request` against the tenant's accounts (in display order) and expand it."""
    if len(request.queries) > limits.max_queries:
        # The request can never succeed as sent: INVALID_ARGUMENT, so clients do not retry it.
        description = f"at most {limits.max_queries} queries per request"
        raise InvalidArgument(
            f"queries: {description}",
            metadata={"limit": str(limits.max_queries)},
            violations=[FieldViolation("queries", description)],
        )
    violations = _Violations()
    _top_level(request, limits, violations)
    checked: list[_Checked] = []
    for index, raw in enumerate(request.queries):
        problem = _check_query(raw, registry, limits)
        if problem is not None:
            violations.add(index, f"queries[{index}].{problem[0]}", problem[1])
            continue
        assert raw.provider is not None
        spec = registry[raw.provider]
        query = _normalised(raw, spec)
        resolved = _resolve(tenant, index, query, accounts, signer, violations,
                            bool(request.page_token))
        if resolved is not None:
            checked.append(
                _Checked(index, raw.provider, query, *resolved, _dedupe_key(query, spec))
            )
    _cross_checks(checked, limits, violations)
    violations.raise_if_any()
    top_k = request.top_k or limits.default_top_k
    targets = [(c, account) for c in checked for account in c.targets]
    slots = tuple(
        Slot(i, c.index, c.query, account, c.start) for i, (c, account) in enumerate(targets)
    )
    unmatched = [(c.index, c.provider, c.gone) for c in checked if not c.targets]
    binding = page_binding(tenant, _fingerprint(top_k, limits, checked))
    resume = None
    if request.page_token:
        keys = [s.key for s in slots]
        resume = decode_page_token(
            signer, binding, request.page_token, keys,
            legacy=lambda: page_binding(tenant, _fingerprint(top_k, limits, checked, slots)),
        )
        # Lists of accounts disconnected since the token was issued end here, each said.
        providers = {c.index: c.provider for c in checked}
        said = {*keys, *((q, a) for q, _, a in unmatched)}
        unmatched += [(q, providers[q], a) for q, a in resume.keys
                      if (q, a) not in said and q in providers]
    return Plan(tenant, top_k, request.max_pages or 1, slots, tuple(unmatched), binding, resume)
