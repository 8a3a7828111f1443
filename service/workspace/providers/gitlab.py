"""GitLab project search (issues, code, merge requests, wiki) over the member's projects."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from service.workspace.http import HttpClient
from service.workspace.model import Kind, NativeDocument, ProviderPage, ProviderQuery, QueryCard
from service.workspace.providers._common import (
    LegResult,
    as_dict,
    as_list,
    check_card,
    dicts,
    documents_of,
    failed,
    gather_legs,
    join_messages,
    make_page_cursor,
    parse_page_cursor,
    parse_time,
    settle,
    sub,
    text,
)

DEFAULT_BASE_URL = "https://gitlab.com"
KINDS: tuple[Kind, ...] = (Kind.ISSUES, Kind.CODE, Kind.MERGE_REQUESTS, Kind.WIKI)
MAX_TEXT_LENGTH = 2000  # the service's cap on native query text; GitLab has no lower limit

CARD = check_card(
    "gitlab",
    QueryCard(
        syntax=(
            "plain terms with kind `issues`, `merge_requests`, `code` or `wiki` (no kind "
            "searches issues, code and merge requests), on the member's projects only; under "
            "basic/advanced search code and wiki accept `filename:`, `path:`, `extension:` "
            "(`-filename:`/`-extension:` exclude); with exact code search use `file:<regex>` "
            'and `lang:`; advanced search also accepts `"phrase"`, `|` for OR, `-word`.'
        ),
        scope=(
            "`account_id` targets one configured source; `project` (numeric id or "
            "`group/name` path) narrows to one project, otherwise the 6 most recently active "
            "member projects are searched."
        ),
        example="connection timeout",
        avoid=(
            "expecting date filters or sorting on code/wiki results (they have no dates, so a "
            "time range excludes them); relying on advanced operators on instances that may "
            "only have basic search."
        ),
    ),
)

SCOPES: Mapping[Kind, str] = {
    Kind.ISSUES: "issues",
    Kind.CODE: "blobs",
    Kind.MERGE_REQUESTS: "merge_requests",
    Kind.WIKI: "wiki_blobs",
}
PROJECTS_SEARCHED = 6
LEG_CONCURRENCY = 4
_UNDATED = frozenset({Kind.CODE, Kind.WIKI})


@dataclass(frozen=True)
class Project:
    """A project to search and what is needed to build result URLs."""

    id: str
    web_url: str
    path: str


@dataclass(frozen=True)
class Leg:
    """One project search call."""

    project: Project
    kind: Kind

    @property
    def label(self) -> str:
        """Human name used in messages."""
        return f"{self.kind.value} search in {self.project.path or self.project.id}"


def plan_kinds(query: ProviderQuery) -> tuple[list[Kind], dict[str, str]]:
    """Kinds a query searches, and the legs skipped with their reasons."""
    if query.kind is None:
        if query.time_range.is_set:
            reason = "code search was skipped: GitLab code results have no dates"
            return [Kind.ISSUES, Kind.MERGE_REQUESTS], {"code": reason}
        return [Kind.ISSUES, Kind.CODE, Kind.MERGE_REQUESTS], {}
    if query.kind not in KINDS:
        raise failed(f"GitLab has no kind {query.kind.value!r}")
    if query.kind in _UNDATED and query.time_range.is_set:
        raise failed(f"GitLab {query.kind.value} results have no dates; remove the time range")
    return [query.kind], {}


def projects_request() -> tuple[str, dict[str, str | int]]:
    """The member's most recently active projects (one more than searched, to detect a cap)."""
    params: dict[str, str | int] = {
        "membership": "true",
        "simple": "true",
        "per_page": PROJECTS_SEARCHED + 1,
        "order_by": "last_activity_at",
        "sort": "desc",
    }
    return "/api/v4/projects", params


def project_path(project: str) -> str:
    """API path of one project given its numeric id or `group/name` path."""
    return "/api/v4/projects/" + quote(project.strip(), safe="")


def parse_project(item: Any) -> Project:
    """A project object as returned by /projects and /projects/:id."""
    body = as_dict(item)
    return Project(
        id=text(body.get("id")),
        web_url=text(body.get("web_url")).rstrip("/"),
        path=text(body.get("path_with_namespace")),
    )


def parse_projects(data: Any) -> list[Project]:
    """Projects of a /projects answer (entries without an id are dropped)."""
    return [project for project in map(parse_project, dicts(data)) if project.id]


def search_request(
    leg: Leg, text_query: str, *, page: int, per_page: int
) -> tuple[str, dict[str, str | int]]:
    """Path and params of one project search call."""
    params: dict[str, str | int] = {
        "scope": SCOPES[leg.kind],
        "search": text_query,
        "per_page": per_page,
        "page": page,
    }
    return project_path(leg.project.id) + "/search", params


def _issue_like(item: dict[str, Any], kind: Kind, project: Project) -> NativeDocument:
    iid = text(item.get("iid"))
    segment = "issues" if kind is Kind.ISSUES else "merge_requests"
    title = text(item.get("title"))
    return NativeDocument(
        id=iid,
        title=title,
        url=text(item.get("web_url")) or f"{project.web_url}/-/{segment}/{iid}",
        content=text(item.get("description")) or title,
        kind="issue" if kind is Kind.ISSUES else "merge_request",
        container=text(item.get("project_id")) or project.id,
        author=text(sub(item, "author", "name")),
        modified_at=parse_time(item.get("updated_at")),
    )


def _blob(item: dict[str, Any], kind: Kind, project: Project) -> NativeDocument:
    path = text(item.get("path")) or text(item.get("filename"))
    if kind is Kind.CODE:
        ref = text(item.get("ref")) or "HEAD"
        url = f"{project.web_url}/-/blob/{quote(ref, safe='')}/{quote(path)}"
    else:
        slug = path.rsplit(".", 1)[0] if "." in path.rsplit("/", 1)[-1] else path
        url = f"{project.web_url}/-/wikis/{quote(slug)}"
    prefix = f"{project.path} · " if project.path else ""
    return NativeDocument(
        id=path,
        title=prefix + path,
        url=url,
        content=text(item.get("data")) or path,
        kind="code" if kind is Kind.CODE else "wiki",
        container=text(item.get("project_id")) or project.id,
    )


def parse_search(kind: Kind, data: Any, project: Project) -> tuple[NativeDocument, ...]:
    """Documents of a project search answer (an array; anything else is FAILED)."""
    parse = _blob if kind in _UNDATED else _issue_like
    items = [item for item in as_list(data) if isinstance(item, dict)]
    return tuple(doc for doc in (parse(item, kind, project) for item in items) if doc.id)


def has_next_page(headers: Mapping[str, str], count: int, per_page: int) -> bool:
    """`x-next-page` when GitLab sends it, else a full page means there may be more."""
    if "x-next-page" in headers:
        return headers["x-next-page"].strip().isdigit()
    return count >= per_page


async def _projects(http: HttpClient, query: ProviderQuery) -> tuple[list[Project], str]:
    if query.project.strip():
        return [parse_project(await http.get_json_memo(project_path(query.project)))], ""
    path, params = projects_request()
    projects = parse_projects(await http.get_json_memo(path, params=params))
    if len(projects) > PROJECTS_SEARCHED:
        note = (
            f"only the {PROJECTS_SEARCHED} most recently active projects were searched; "
            "set project to search another"
        )
        return projects[:PROJECTS_SEARCHED], note
    return projects, ""


async def _run_leg(http: HttpClient, leg: Leg, terms: str, page: int, per_page: int) -> LegResult:
    path, params = search_request(leg, terms, page=page, per_page=per_page)
    response = await http.get(path, params=params)
    documents = parse_search(leg.kind, response.data, leg.project)
    more = has_next_page(response.headers, len(documents), per_page)
    return LegResult(documents, next_token=str(page + 1) if more else None)


def _legs(projects: Sequence[Project], kinds: Sequence[Kind]) -> list[Leg]:
    return [Leg(project, kind) for kind in kinds for project in projects]


async def search(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """Search the member's projects (or `project`) per kind and interleave the results."""
    terms = query.text.strip()
    if not terms:
        raise failed("GitLab search needs search terms")
    kinds, skipped = plan_kinds(query)
    projects, note = await _projects(http, query)
    if not projects:
        message = "this GitLab account is not a member of any project; nothing was searched"
        return ProviderPage(
            (), partial=True, message=join_messages([*skipped.values(), message]),
            skipped_legs=skipped,
        )
    legs = _legs(projects, kinds)
    page, active = parse_page_cursor(query.cursor, len(legs))
    per_page = max(1, min(query.limit, 100))

    def call(leg: Leg) -> Callable[[], Awaitable[LegResult]]:
        return lambda: _run_leg(http, leg, terms, page, per_page)

    outcomes = await gather_legs([call(legs[i]) for i in active], concurrency=LEG_CONCURRENCY)
    settled = settle([(legs[i].label, out) for i, out in zip(active, outcomes, strict=True)])
    results, errors = settled.legs, settled.messages
    continuing = [i for i in active if (leg := results.get(legs[i].label)) and leg.next_token]
    degraded = [note, *errors]
    return ProviderPage(
        documents_of(results),
        next_cursor=make_page_cursor(page + 1, continuing, len(legs)),
        partial=any(degraded),
        message=join_messages([*skipped.values(), *degraded]),
        skipped_legs=skipped,
        complete=settled.complete,
        retry_after=settled.retry_after,
    )
