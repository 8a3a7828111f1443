"""Jira Cloud enhanced JQL search (`/rest/api/3/search/jql`) over the account's sites."""

from __future__ import annotations

from typing import Any

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
    "jira",
    QueryCard(
        syntax=(
            'JQL: `text ~ "term"` (stemmed; `win*` prefix; escaped inner quotes for a phrase), '
            '`summary ~ "term"`, `project = KEY AND status = "Done"`, joined with AND/OR/NOT '
            "and parentheses, optionally ending `ORDER BY updated DESC`."
        ),
        scope=(
            "`assignee = currentUser()`, `reporter = currentUser()`, `project = KEY`; to target "
            "one site (required for paging across several sites) put its Atlassian cloud id in "
            "the native `project` field, not in JQL."
        ),
        example='text ~ "deployment" AND assignee = currentUser() ORDER BY updated DESC',
        avoid=(
            "JQL that is only an ORDER BY (Jira rejects unbounded queries); naming other users "
            "by display name or email - use account ids."
        ),
    ),
)

SEARCH_PATH = "/rest/api/3/search/jql"
FIELDS = ("summary", "description", "updated", "creator", "status", "comment")
MAX_RESULTS = 100


def build_jql(query: ProviderQuery) -> str:
    """The native JQL with `updated` bounds (widened a day) AND-ed in before any ORDER BY."""
    return and_clauses(query.text, date_clauses("updated", query.time_range))


def build_request(
    query: ProviderQuery, site: Site, page_token: str | None
) -> tuple[str, dict[str, Any]]:
    """Path and JSON body of one enhanced search call on `site`."""
    body: dict[str, Any] = {
        "jql": build_jql(query),
        "maxResults": max(1, min(query.limit, MAX_RESULTS)),
        "fields": list(FIELDS),
    }
    if page_token:
        body["nextPageToken"] = page_token
    return site.api_prefix + SEARCH_PATH, body


def adf_text(node: Any) -> str:
    """Plain text of an Atlassian Document Format node (blocks become lines)."""
    if isinstance(node, str):
        return node
    if not isinstance(node, dict):
        return ""
    if node.get("type") == "text":
        return text(node.get("text"))
    if node.get("type") == "hardBreak":
        return "\n"
    parts = [adf_text(child) for child in node.get("content") or []]
    inline = node.get("type") in ("paragraph", "heading")
    joined = "".join(parts) if inline else "\n".join(part for part in parts if part)
    return joined.strip("\n")


def _issue(item: dict[str, Any], site: Site) -> NativeDocument:
    key = text(item.get("key"))
    fields = sub(item, "fields") or {}
    summary = text(sub(fields, "summary"))
    comments = [adf_text(sub(c, "body")) for c in dicts(sub(fields, "comment", "comments"))]
    status = text(sub(fields, "status", "name"))
    lines = [summary, adf_text(sub(fields, "description")), f"Status: {status}" if status else ""]
    return NativeDocument(
        id=key,
        title=f"{key}: {summary}" if summary else key,
        url=f"{site.url}/browse/{key}",
        content="\n".join(line for line in [*lines, *comments] if line),
        kind="issue",
        container=site.cloud_id or site.url,
        author=text(sub(fields, "creator", "displayName")),
        modified_at=parse_time(sub(fields, "updated")),
    )


def parse_response(data: Any, site: Site) -> LegResult:
    """Issues and the continuation (absent, null or `isLast` = done) of one site's answer."""
    body = as_dict(data)
    documents = tuple(doc for doc in (_issue(i, site) for i in dicts(body.get("issues"))) if doc.id)
    token = text(body.get("nextPageToken")) or None
    return LegResult(documents, next_token=None if body.get("isLast") is True else token)


async def search(http: HttpClient, query: ProviderQuery) -> ProviderPage:
    """JQL search on each accessible site (or the one in `project`)."""

    async def run(site: Site, token: str | None) -> LegResult:
        path, body = build_request(query, site, token)
        return parse_response(await http.post_json(path, json=body), site)

    return await fan_out(http, query, "jira", run)
