"""Confluence Cloud CQL search (`/wiki/rest/api/search`) over the account's sites."""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import parse_qs, urlsplit

from service.workspace.http import HttpClient
from service.workspace.model import Kind, NativeDocument, ProviderPage, ProviderQuery, QueryCard
from service.workspace.providers._atlassian import Site, date_clauses, fan_out
from service.workspace.providers._common import (
    LegResult,
    and_clauses,
    as_dict,
    check_card,
    dicts,
    parse_time,
    sub,
    text,
)

DEFAULT_BASE_URL = "https://api.atlassian.com"
KINDS: tuple[Kind, ...] = ()
MAX_TEXT_LENGTH = 2000  # the service's cap on native query text

CARD = check_card(
    "confluence",
    QueryCard(
        syntax=(
            'CQL: `text ~ "term"`, `title ~ "term"` (`title ~ "win*"` prefix), `type IN (page, '
            "blogpost)`, `space = KEY` (quote keys starting with a digit), AND/OR/NOT, "
            "parentheses; add `ORDER BY lastmodified DESC` only when recency beats relevance."
        ),
        scope=(
            "`creator = currentUser()`, `contributor = currentUser()`, `mention = "
            "currentUser()`, `space = KEY`; CQL has no project field - the native `project` "
            "takes the site cloud id."
        ),
        example='type IN (page, blogpost) AND space = ENG AND text ~ "roadmap"',
        avoid=(
            "starting with a negative clause (`NOT`, `!=`, `!~`, `NOT IN`) - CQL rejects it; "
            "lead with a positive clause such as `type IN (page, blogpost)`."
        ),
    ),
)

SEARCH_PATH = "/wiki/rest/api/search"
DEFAULT_CQL = "type IN (page, blogpost)"
EXPAND = "content.version,content.space"
MAX_LIMIT = 100
KEPT_TYPES = frozenset({"page", "blogpost"})
_MARKERS = ("@@@hl@@@", "@@@endhl@@@")


def build_cql(query: ProviderQuery) -> str:
    """The native CQL (or all pages and blog posts) with `lastmodified` bounds AND-ed in."""
    cql = query.text.strip() or DEFAULT_CQL
    return and_clauses(cql, date_clauses("lastmodified", query.time_range))


def build_request(
    query: ProviderQuery, site: Site, cursor: str | None
) -> tuple[str, dict[str, str | int]]:
    """Path and params of one CQL search call on `site`."""
    params: dict[str, str | int] = {
        "cql": build_cql(query),
        "limit": max(1, min(query.limit, MAX_LIMIT)),
        "expand": EXPAND,
    }
    if cursor:
        params["cursor"] = cursor
    return site.api_prefix + SEARCH_PATH, params


def next_cursor(body: dict[str, Any]) -> str | None:
    """The `cursor` parameter of `_links.next`, if any."""
    link = text(sub(body, "_links", "next"))
    values = parse_qs(urlsplit(link).query).get("cursor") if link else None
    return values[0] if values else None


def strip_highlight(value: str) -> str:
    """Excerpt text without Confluence's highlight markers."""
    for marker in _MARKERS:
        value = value.replace(marker, "")
    return value


def _web_url(site: Site, base: str, path: str) -> str:
    if not path:
        return ""
    if path.startswith(("http://", "https://")):
        return path
    # The site's own origin; `_links.base` can name the API gateway instead.
    return f"{site.url + '/wiki' if site.url else base}{path}"


def _content(result: dict[str, Any], site: Site, base: str) -> NativeDocument:
    content = sub(result, "content") or {}
    version = sub(content, "version") or {}
    body = text(sub(content, "body", "view", "value"))
    return NativeDocument(
        id=text(sub(content, "id")),
        title=text(sub(content, "title")) or text(result.get("title")),
        url=_web_url(site, base, text(sub(content, "_links", "webui"))),
        content=strip_highlight(body or text(result.get("excerpt"))),
        kind=text(sub(content, "type")),
        container=site.cloud_id or site.url,
        author=text(sub(version, "by", "displayName")),
        modified_at=parse_time(sub(version, "when")) or parse_time(result.get("lastModified")),
    )


def _space(result: dict[str, Any], site: Site, base: str) -> NativeDocument:
    space = sub(result, "space") or {}
    key = text(sub(space, "key"))
    return NativeDocument(
        id=f"space:{key}" if key else "",
        title=text(result.get("title")) or text(sub(space, "name")),
        url=_web_url(site, base, text(result.get("url")) or text(sub(space, "_links", "webui"))),
        content=strip_highlight(text(result.get("excerpt"))),
        kind="space",
        container=site.cloud_id or site.url,
        modified_at=parse_time(result.get("lastModified")),
    )


def parse_response(data: Any, site: Site) -> LegResult:
    """Pages, blog posts and spaces of one site's answer; other types are counted and dropped."""
    body = as_dict(data)
    base = text(sub(body, "_links", "base")).rstrip("/")
    documents: list[NativeDocument] = []
    dropped: Counter[str] = Counter()
    for result in dicts(body.get("results")):
        kind = text(sub(result, "content", "type"))
        if text(result.get("entityType")) == "space":
            documents.append(_space(result, site, base))
        elif kind in KEPT_TYPES:
            documents.append(_content(result, site, base))
        else:
            dropped[kind or text(result.get("entityType")) or "unknown"] += 1
    message = ""
    if dropped:
        kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(dropped.items()))
        message = f"left out results that are not pages, blog posts or spaces ({kinds})"
    kept = tuple(doc for doc in documents if doc.id)
    return LegResult(kept, next_token=next_cursor(body), message=message)


async def search(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """CQL search on each accessible site (or the one in `project`)."""

    async def run(site: Site, cursor: str | None) -> LegResult:
        path, params = build_request(query, site, cursor)
        return parse_response(await http.get_json(path, params=params), site)

    return await fan_out(http, query, "confluence", run)
