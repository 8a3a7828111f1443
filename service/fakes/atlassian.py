"""Fake Atlassian Cloud: accessible-resources, Jira enhanced JQL search, Confluence CQL search.

The JQL/CQL evaluator is deliberately small: AND/OR of `field ~ "text"`, `field = value`,
`field >= "date"`, `type IN (...)`; other clauses (e.g. `assignee = currentUser()`) match.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from service.fakes.base import (
    FakeProvider,
    matches_all,
    page_slice,
    parse_when,
    words,
)
from service.fakes.server import Request, Response

Item = dict[str, Any]
Getter = Callable[[Item, str], str]
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_CLAUSE = re.compile(r"^\s*(\w+)\s*(~|!~|=|!=|>=|<=|>|<|\bIN\b)\s*(.+?)\s*$", re.IGNORECASE)


class QueryError(ValueError):
    """The site's 400 for a query it cannot run."""


def split_order(query: str) -> str:
    """The filter part, without ORDER BY."""
    blank = _QUOTED.sub(lambda m: "x" * len(m.group(0)), query)
    found = list(re.finditer(r"\border\s+by\b", blank, re.IGNORECASE))
    return query[: found[-1].start()].strip() if found else query.strip()


def _split(query: str, word: str) -> list[str]:
    blank = _QUOTED.sub(lambda m: "x" * len(m.group(0)), query)
    parts, start = [], 0
    for found in re.finditer(rf"\s+{word}\s+", blank):
        parts.append(query[start : found.start()])
        start = found.end()
    return [*parts, query[start:]]


def evaluate(query: str, get: Getter) -> Callable[[Item], bool]:
    """A predicate for the filter part (parentheses flattened, OR of ANDs)."""
    flat = re.sub(
        r"\btype\s+IN\s*\(([^)]*)\)",
        lambda m: "type IN " + m.group(1).replace(" ", ""),
        query,
        flags=re.IGNORECASE,
    )
    flat = _strip_parens(flat)
    groups = [[_clause(c, get) for c in _split(g, "AND")] for g in _split(flat, "OR")]
    return lambda item: any(all(check(item) for check in group) for group in groups)


def _strip_parens(query: str) -> str:
    out, quoted = [], False
    for ch in query:
        if ch == '"':
            quoted = not quoted
        out.append(" " if ch in "()" and not quoted else ch)
    return "".join(out)


def _clause(clause: str, get: Getter) -> Callable[[Item], bool]:
    clause = clause.strip()
    negate = clause.upper().startswith("NOT ")
    if negate:
        clause = clause[4:]
    found = _CLAUSE.match(clause)
    if not found:
        raise QueryError(clause)
    field, op, raw = found.group(1).lower(), found.group(2).upper(), found.group(3).strip()
    value = raw[1:-1].replace('\\"', '"') if raw.startswith('"') else raw
    check = _check(field, op, value, get)
    return (lambda item: not check(item)) if negate else check


def _check(field: str, op: str, value: str, get: Getter) -> Callable[[Item], bool]:
    if op in ("~", "!~"):
        terms = words(value)
        return lambda item: matches_all(terms, get(item, field)) == (op == "~")
    if op == "IN":
        allowed = {v.strip().lower() for v in value.split(",")}
        return lambda item: get(item, field).lower() in allowed
    if field in ("updated", "lastmodified"):
        bound = parse_when(value)
        compare = {
            ">=": bound.__le__,
            "<=": lambda t: t.date() <= bound.date(),
            ">": bound.__lt__,
            "<": bound.__gt__,
        }[op]
        return lambda item: compare(parse_when(get(item, field)))
    if "(" in value or field not in ("project", "status", "space", "type"):
        return lambda item: True  # currentUser(), account ids...: not modelled
    return lambda item: (get(item, field).lower() == value.lower()) == (op == "=")


class FakeAtlassian(FakeProvider):
    """Common part: sites from /oauth/token/accessible-resources."""

    product = ""

    def __init__(self) -> None:
        super().__init__()
        self.route("GET", r"/oauth/token/accessible-resources", self._resources)
        self.reset()

    def reset(self) -> None:
        """No sites."""
        super().reset()
        self.sites: list[dict[str, Any]] = []
        self.items: dict[str, list[Item]] = {}

    def unauthorized(self) -> Response:
        """Atlassian's 401."""
        return Response.json({"code": 401, "message": "Unauthorized"}, 401)

    def add_site(self, cloud_id: str, name: str, scopes: tuple[str, ...] = ()) -> None:
        """A cloud site the token can reach."""
        self.sites.append(
            {
                "id": cloud_id,
                "url": f"https://{name}.atlassian.net",
                "name": name,
                "scopes": list(scopes) or [f"read:{self.product}-work", f"search:{self.product}"],
                "avatarUrl": "",
            }
        )
        self.items[cloud_id] = []

    def site_of(self, found: re.Match[str]) -> str | None:
        """Cloud id from the /ex/<product>/<id> prefix, or the first site for direct access."""
        cloud_id = found.groupdict().get("cloud")
        if cloud_id:
            return cloud_id if cloud_id in self.items else None
        return self.sites[0]["id"] if self.sites else None

    def _resources(self, request: Request, _: re.Match[str]) -> Response:
        return Response.json(self.sites)


class FakeJira(FakeAtlassian):
    """Jira Cloud: POST /rest/api/3/search/jql (direct or through /ex/jira/<cloudId>)."""

    name = "jira"
    product = "jira"

    def __init__(self) -> None:
        super().__init__()
        for prefix in (r"/ex/jira/(?P<cloud>[^/]+)", ""):
            self.route("POST", prefix + r"/rest/api/3/search/jql", self._search)

    def add_issue(
        self,
        cloud_id: str,
        key: str,
        summary: str,
        description: str = "",
        *,
        updated: str = "2024-01-01T10:00:00.000+0000",
        status: str = "To Do",
    ) -> None:
        """An issue with an ADF description."""
        self.items[cloud_id].append(
            {
                "id": str(len(self.items[cloud_id]) + 10000),
                "key": key,
                "self": f"https://api.atlassian.com/ex/jira/{cloud_id}/rest/api/3/issue/{key}",
                "fields": {
                    "summary": summary,
                    "updated": updated,
                    "created": updated,
                    "status": {"name": status},
                    "project": {"key": key.split("-")[0]},
                    "creator": {"accountId": "acc-1", "displayName": "Jane Doe"},
                    "description": {
                        "type": "doc",
                        "version": 1,
                        "content": [
                            {
                                "type": "paragraph",
                                "content": [{"type": "text", "text": description}],
                            }
                        ],
                    },
                },
            }
        )

    @staticmethod
    def _get(item: Item, field: str) -> str:
        fields = item["fields"]
        if field == "text":
            return (
                f"{fields['summary']} {fields['description']['content'][0]['content'][0]['text']}"
            )
        if field in ("status", "project"):
            return str(fields[field].get("name") or fields[field].get("key"))
        return str(fields.get(field, ""))

    def _search(self, request: Request, found: re.Match[str]) -> Response:
        cloud_id = self.site_of(found)
        if cloud_id is None:
            return Response.json({"errorMessages": ["site not found"]}, 404)
        body = request.json() or {}
        jql = str(body.get("jql", ""))
        if not split_order(jql):
            return Response.json(
                {
                    "errorMessages": [
                        "Unbounded JQL queries are not allowed here. Please add a search "
                        "restriction to your query."
                    ]
                },
                400,
            )
        try:
            predicate = evaluate(split_order(jql), self._get)
        except QueryError:
            return Response.json({"errorMessages": ["Error in the JQL Query."]}, 400)
        hits = sorted(
            (i for i in self.items[cloud_id] if predicate(i)),
            key=lambda i: i["fields"]["updated"],
            reverse=True,
        )
        token = body.get("nextPageToken")
        offset = self.page_offset(token) if token else 0
        if offset is None:
            return Response.json({"errorMessages": ["Invalid nextPageToken"]}, 400)
        chunk, following = page_slice(hits, offset, min(int(body.get("maxResults", 50)), 100))
        wanted = set(body.get("fields") or [])
        issues = [
            {**i, "fields": {k: v for k, v in i["fields"].items() if k in wanted}}
            if wanted
            else {"id": i["id"]}
            for i in chunk
        ]
        answer: dict[str, Any] = {"issues": issues, "isLast": following is None}
        if following is not None:
            answer["nextPageToken"] = self.page_token(following)
        return Response.json(answer)


class FakeConfluence(FakeAtlassian):
    """Confluence Cloud: GET /wiki/rest/api/search (direct or through /ex/confluence/<cloudId>)."""

    name = "confluence"
    product = "confluence"

    def __init__(self) -> None:
        super().__init__()
        for prefix in (r"/ex/confluence/(?P<cloud>[^/]+)", ""):
            self.route("GET", prefix + r"/wiki/rest/api/search", self._search)

    def add_content(
        self,
        cloud_id: str,
        content_id: str,
        title: str,
        text: str,
        *,
        kind: str = "page",
        space: str = "ENG",
        when: str = "2024-01-01T10:00:00.000Z",
    ) -> None:
        """A page, blog post, attachment or comment."""
        self.items[cloud_id].append(
            {
                "content": {
                    "id": content_id,
                    "type": kind,
                    "status": "current",
                    "title": title,
                    "space": {"key": space},
                    "version": {"when": when, "by": {"displayName": "Jane Doe"}},
                    "_links": {
                        "webui": f"/spaces/{space}/pages/{content_id}",
                        "self": "",
                        "tinyui": "",
                    },
                },
                "title": title,
                "excerpt": f"@@@hl@@@{text[:40]}@@@endhl@@@ {text[40:120]}",
                "url": f"/spaces/{space}/pages/{content_id}",
                "entityType": "content",
                "lastModified": when,
                "_text": text,
            }
        )

    @staticmethod
    def _get(item: Item, field: str) -> str:
        content = item["content"]
        if field == "text":
            return f"{content['title']} {item['_text']}"
        if field == "lastmodified":
            return str(content["version"]["when"])
        if field == "space":
            return str(content["space"]["key"])
        return str(content.get(field, ""))

    def _search(self, request: Request, found: re.Match[str]) -> Response:
        cloud_id = self.site_of(found)
        if cloud_id is None:
            return Response.json({"statusCode": 404, "message": "site not found"}, 404)
        cql = request.arg("cql")
        head = cql.lstrip("( ").upper()
        first = _split(split_order(cql), "AND")[0]
        if not cql.strip() or head.startswith("NOT ") or "!=" in first or "!~" in first:
            return Response.json(
                {"statusCode": 400, "message": "Could not parse cql : " + cql[:60]}, 400
            )
        try:
            predicate = evaluate(split_order(cql), self._get)
        except QueryError:
            return Response.json({"statusCode": 400, "message": "Could not parse cql"}, 400)
        hits = [i for i in self.items[cloud_id] if predicate(i)]
        offset = self.page_offset(request.arg("cursor")) if request.arg("cursor") else 0
        if offset is None:
            return Response.json({"statusCode": 400, "message": "invalid cursor"}, 400)
        limit = min(int(request.arg("limit", "25")), 100)
        chunk, following = page_slice(hits, offset, limit)
        links: dict[str, Any] = {
            "base": f"https://{cloud_id}.atlassian.net/wiki",
            "context": "/wiki",
        }
        if following is not None:
            params = {"cql": cql, "limit": limit, "cursor": self.page_token(following)}
            links["next"] = "/rest/api/search?" + urlencode(params)
        results = [{k: v for k, v in i.items() if not k.startswith("_")} for i in chunk]
        return Response.json(
            {
                "results": results,
                "start": offset,
                "limit": limit,
                "size": len(chunk),
                "totalSize": len(hits),
                "cqlQuery": cql,
                "_links": links,
            }
        )
