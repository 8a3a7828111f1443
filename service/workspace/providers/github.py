"""GitHub REST search (issues/PRs, code, commits, repositories), bounded to affiliated repos."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from service.workspace.http import HttpClient
from service.workspace.model import (
    Kind,
    ProviderPage,
    ProviderQuery,
    QueryCard,
    TimeRange,
)
from service.workspace.providers._common import (
    LegResult,
    check_card,
    documents_of,
    failed,
    gather_legs,
    has_boolean_operators,
    join_messages,
    make_page_cursor,
    parse_page_cursor,
    rfc3339,
    settle,
)
from service.workspace.providers._github_results import parse_repos as parse_repos
from service.workspace.providers._github_results import parse_search as parse_search

DEFAULT_BASE_URL = "https://api.github.com"
KINDS: tuple[Kind, ...] = (Kind.ISSUES, Kind.CODE, Kind.COMMITS, Kind.REPOSITORIES)
MAX_TEXT_LENGTH = 256  # GitHub's limit on search text, qualifiers and operators excluded

CARD = check_card(
    "github",
    QueryCard(
        syntax=(
            "GitHub search qualifiers with kind `issues` (issues and pull requests), `commits`, "
            "`code` or `repositories`; no kind searches issues and code, so use kind issues with "
            "`is:pr`/`is:issue`/`involves:`; at most 5 AND/OR/NOT operators and 256 characters "
            "of search text; commit searches need a term or a qualifier beyond `repo:`/`org:`/"
            "`user:` (e.g. `author:`, `committer:`, a date)."
        ),
        scope=(
            "`repo:owner/name`, `org:`, `author:`, `involves:`, `assignee:`, `is:pr`, `is:open`, "
            "`label:`, `in:comments`, `review:approved`, `reviewed-by:`, `review-requested:`, "
            "`@me` = the account's user; commits take `author:`, `committer:`, `author-date:`, "
            "`committer-date:`; without repo/org/user a search covers up to 100 affiliated "
            "repositories (most recently pushed first)."
        ),
        example="is:pr involves:octocat repo:org/repo",
        avoid=(
            "more than 5 boolean operators (rejected); space-separated alternatives (all are "
            "required). Use OR for issues/commits/repositories, but code search has no "
            "AND/OR/NOT: search code alternatives with kind code in separate calls; code covers "
            "default branches only and has no dates, so a time range excludes it."
        ),
    ),
)

HEADERS = {
    "Accept": "application/vnd.github.text-match+json",
    "X-GitHub-Api-Version": "2022-11-28",
}
MAX_REACHABLE = 1000  # GitHub serves only the first 1,000 results of a search
CODE_Q_BYTES = 980  # code search rejects q over 1,000 bytes
OTHER_Q_BYTES = 3800
MAX_BATCHES = 4
REPO_LIST_SIZE = 100
LEG_CONCURRENCY = 4

_QUALIFIER = re.compile(r'(?<![\w-])-?[\w-]+:(?:"[^"]*"|\S*)')
_SCOPED = re.compile(r"(?<![\w-])(?:repo|org|user):\S")
_TYPED = re.compile(r"(?<![\w-])(?:is|type):(?:issue|pr|pull-request)\b", re.IGNORECASE)
_DATE_QUALIFIER = {
    Kind.ISSUES: "updated",
    Kind.COMMITS: "author-date",
    Kind.REPOSITORIES: "pushed",
}
CODE_BOOLEANS = (
    "GitHub code search has no AND/OR/NOT (it answers such a query with no results); send "
    "each alternative as its own kind code query, in separate calls (one code query per "
    "account per call)"
)
_CODE_BOOLEAN_SKIP = (
    "code search was skipped: GitHub code search has no AND/OR/NOT; search code alternatives "
    "with kind code in separate queries"
)
NO_REPOS = "no repositories are affiliated with this GitHub account; nothing was searched"
_CODE_DATE_SKIP = (
    "code search was skipped: code has no dates and is excluded from date-filtered searches"
)


@dataclass(frozen=True)
class Leg:
    """One GitHub search request in the plan of a query."""

    kind: Kind
    q: str
    label: str


@dataclass(frozen=True)
class Plan:
    """The searches one query makes, and what it leaves out and why."""

    legs: tuple[Leg, ...]
    skipped: Mapping[str, str] = field(default_factory=dict)
    coverage: tuple[str, ...] = ()  # repositories left out because q would grow too long


def free_text(query: str) -> str:
    """The search text GitHub counts against 256 chars: no qualifiers, operators or parens."""
    bare = _QUALIFIER.sub(" ", query)
    bare = re.sub(r"\b(?:AND|OR|NOT)\b|[()]", " ", bare)
    return " ".join(bare.split())


def search_text_length(query: str) -> int:
    """Characters of `query` that count against MAX_TEXT_LENGTH (the free text)."""
    return len(free_text(query))


def check_text(query: str, kind: Kind | None) -> str:
    """Why `query` cannot work as a search of `kind` ('' when it can)."""
    if kind is Kind.CODE and has_boolean_operators(query):
        return CODE_BOOLEANS
    return ""


def is_scoped(query: str) -> bool:
    """True when the query names its own repo:/org:/user: scope."""
    return bool(_SCOPED.search(query))


def plan_kinds(query: ProviderQuery) -> tuple[list[Kind], dict[str, str]]:
    """Which search endpoints a query uses, and the legs skipped with their reasons."""
    if query.kind is None:
        if query.time_range.is_set:
            return [Kind.ISSUES], {"code": _CODE_DATE_SKIP}
        if has_boolean_operators(query.text):
            return [Kind.ISSUES], {"code": _CODE_BOOLEAN_SKIP}
        return [Kind.ISSUES, Kind.CODE], {}
    if query.kind not in KINDS:
        raise failed(f"GitHub has no kind {query.kind.value!r}")
    if query.kind is Kind.CODE and has_boolean_operators(query.text):
        raise failed(CODE_BOOLEANS)
    if query.kind is Kind.CODE and query.time_range.is_set:
        raise failed("GitHub code search has no dates; remove the time range or use another kind")
    return [query.kind], {}


def date_qualifier(kind: Kind, time_range: TimeRange, query: str) -> str:
    """One range qualifier (GitHub ORs repeated ones); '' when none or the query has its own."""
    name = _DATE_QUALIFIER.get(kind)
    if name is None or not time_range.is_set:
        return ""
    if re.search(rf"(?<![\w-]){re.escape(name)}:", query):
        return ""
    start, end = time_range.start, time_range.end
    if start is not None and end is not None:
        return f"{name}:{rfc3339(start)}..{rfc3339(end)}"
    if start is not None:
        return f"{name}:>={rfc3339(start)}"
    assert end is not None
    return f"{name}:<{rfc3339(end)}"


def compose_q(query: str, extras: Sequence[str]) -> str:
    """Free text then qualifiers; boolean text is parenthesised so qualifiers apply to all of it."""
    core = query.strip()
    extras = [extra for extra in extras if extra]
    wrapped = core.startswith("(") and core.endswith(")")
    if core and extras and has_boolean_operators(core) and not wrapped:
        core = f"({core})"
    return " ".join([core, *extras]).strip()


def repo_batches(
    repos: Sequence[str], base_q: str, *, max_bytes: int, max_batches: int = MAX_BATCHES
) -> tuple[list[list[str]], int]:
    """Split `repo:` qualifiers into batches whose q fits; returns batches and repos covered."""
    batches: list[list[str]] = []
    current: list[str] = []
    size = len(base_q.encode())
    for repo in repos:
        qualifier = f"repo:{repo}"
        extra = len(qualifier.encode()) + 1
        if current and size + extra > max_bytes:
            batches.append(current)
            if len(batches) == max_batches:
                return batches, sum(len(b) for b in batches)
            current, size = [], len(base_q.encode())
        current.append(qualifier)
        size += extra
    if current:
        batches.append(current)
    return batches, sum(len(b) for b in batches)


def _kind_variants(kind: Kind, query: str) -> list[tuple[str, str]]:
    if kind is Kind.ISSUES and not _TYPED.search(query):
        # /search/issues is moving to require is:issue or is:pull-request.
        return [("is:issue", "issue search"), ("is:pull-request", "pull request search")]
    return [("", f"{kind.value} search")]


def build_plan(query: ProviderQuery, repos: Sequence[str] | None) -> Plan:
    """Every search of the query: kinds x issue/PR split x affiliated-repo batches."""
    kinds, skipped = plan_kinds(query)
    legs: list[Leg] = []
    coverage: list[str] = []
    for kind in kinds:
        date = date_qualifier(kind, query.time_range, query.text)
        for variant, label in _kind_variants(kind, query.text):
            base = compose_q(query.text, [variant, date])
            if repos is None:
                legs.append(Leg(kind, base, label))
                continue
            limit = CODE_Q_BYTES if kind is Kind.CODE else OTHER_Q_BYTES
            batches, covered = repo_batches(repos, base, max_bytes=limit)
            if covered < len(repos):
                coverage.append(
                    f"{kind.value} search covered only the {covered} most recently pushed "
                    "repositories; add repo: or org: to search others"
                )
            for number, batch in enumerate(batches, start=1):
                suffix = f" (repositories batch {number})" if len(batches) > 1 else ""
                legs.append(
                    Leg(kind, compose_q(query.text, [*batch, variant, date]), label + suffix)
                )
    return Plan(tuple(legs), skipped, tuple(coverage))


def search_request(leg: Leg, *, page: int, per_page: int) -> tuple[str, dict[str, str | int]]:
    """Path and params of one search call."""
    return f"/search/{leg.kind.value}", {"q": leg.q, "per_page": per_page, "page": page}


def repos_request() -> tuple[str, dict[str, str | int]]:
    """Path and params listing the account's affiliated repositories, most recently pushed first."""
    params: dict[str, str | int] = {
        "affiliation": "owner,collaborator,organization_member",
        "per_page": REPO_LIST_SIZE,
        "sort": "pushed",
    }
    return "/user/repos", params


def has_next_page(page: int, per_page: int, total: int | None) -> bool:
    """True while page x per_page is below min(total, 1000)."""
    return total is not None and page * per_page < min(total, MAX_REACHABLE)


async def _run_leg(http: HttpClient, leg: Leg, page: int, per_page: int) -> LegResult:
    path, params = search_request(leg, page=page, per_page=per_page)
    data = await http.get_json(path, params=params, headers=HEADERS)
    documents, total, incomplete = parse_search(leg.kind, data)
    more = has_next_page(page, per_page, total)
    capped = not more and total is not None and total > MAX_REACHABLE
    return LegResult(
        documents,
        next_token=str(page + 1) if more else None,
        total=total,
        incomplete=incomplete,
        message=f"{leg.label} has more than {MAX_REACHABLE} matches; narrow the query"
        if capped
        else "",
    )


async def _affiliated_repos(http: HttpClient) -> tuple[list[str], str]:
    path, params = repos_request()
    repos = parse_repos(await http.get_json_memo(path, params=params))
    note = ""
    if len(repos) >= REPO_LIST_SIZE:
        note = f"only the {REPO_LIST_SIZE} most recently pushed repositories were searched"
    return repos, note


def _total(plan: Plan, active: Sequence[int], legs: Mapping[str, LegResult]) -> int | None:
    if len(active) != len(plan.legs) or len(legs) != len(plan.legs):
        return None  # a later page, or a failed leg: the sum would undercount
    totals = [leg.total for leg in legs.values()]
    return sum(t for t in totals if t is not None) if None not in totals else None


async def search(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """Search GitHub; without repo:/org:/user: only the account's affiliated repositories."""
    if search_text_length(query.text) > MAX_TEXT_LENGTH:
        raise failed(f"GitHub search text is limited to {MAX_TEXT_LENGTH} characters")
    plan_kinds(query)  # reject impossible kinds before spending requests
    repos: list[str] | None = None
    degraded: list[str] = []
    if not is_scoped(query.text):
        repos, note = await _affiliated_repos(http)
        degraded.append(note)
        if not repos:
            skipped = build_plan(query, None).skipped
            return ProviderPage(
                (), partial=True, message=join_messages([*skipped.values(), NO_REPOS]),
                skipped_legs=skipped,
            )
    plan = build_plan(query, repos)
    page, active = parse_page_cursor(query.cursor, len(plan.legs))
    per_page = max(1, min(query.limit, 100))

    def call(leg: Leg) -> Callable[[], Awaitable[LegResult]]:
        return lambda: _run_leg(http, leg, page, per_page)

    outcomes = await gather_legs([call(plan.legs[i]) for i in active], concurrency=LEG_CONCURRENCY)
    labelled = [(plan.legs[i].label, out) for i, out in zip(active, outcomes, strict=True)]
    settled = settle(labelled)
    legs, errors = settled.legs, settled.messages
    continuing = [i for i in active if (leg := legs.get(plan.legs[i].label)) and leg.next_token]
    incomplete = any(leg.incomplete for leg in legs.values())
    degraded += [*plan.coverage, *errors, *(leg.message for leg in legs.values())]
    if incomplete:
        degraded.append("GitHub returned incomplete results (the search timed out on its side)")
    total = _total(plan, active, legs)
    return ProviderPage(
        documents_of(legs),
        next_cursor=make_page_cursor(page + 1, continuing, len(plan.legs)),
        total=total,
        total_is_exact=total is not None and not incomplete,
        partial=any(degraded),
        message=join_messages([*plan.skipped.values(), *degraded]),
        skipped_legs=plan.skipped,
        complete=settled.complete,
        retry_after=settled.retry_after,
    )
