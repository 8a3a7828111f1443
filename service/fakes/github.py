"""Fake GitHub REST API: /user/repos and /search/{issues,code,commits,repositories}."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from service.fakes.base import FakeProvider, matches_all, parse_when
from service.fakes.server import Request, Response

_BOOLEANS = {"AND", "OR", "NOT"}


@dataclass
class ParsedQ:
    """A GitHub search q split into alternatives of words, qualifiers and operator count."""

    groups: list[list[str]] = field(default_factory=lambda: [[]])
    qualifiers: dict[str, list[str]] = field(default_factory=dict)
    operators: int = 0


def parse_q(q: str) -> ParsedQ:
    """Tokens outside quotes; OR splits alternatives, qualifiers apply to all of them."""
    parsed = ParsedQ()
    try:
        tokens = shlex.split(q.replace("(", " ").replace(")", " "))
    except ValueError:
        tokens = q.split()
    for token in tokens:
        if token in _BOOLEANS:
            parsed.operators += 1
            if token == "OR":
                parsed.groups.append([])
        elif re.fullmatch(r"-?[\w-]+:.+", token):
            name, value = token.split(":", 1)
            parsed.qualifiers.setdefault(name.lower(), []).append(value)
        else:
            parsed.groups[-1].append(token.lower())
    return parsed


def in_range(spec: str, when: datetime | None) -> bool:
    """GitHub range syntax: A..B, >=A, >A, <=A, <A, A (same day), * open ends."""
    if when is None:
        return False
    if ".." in spec:
        low, high = spec.split("..", 1)
        return (low == "*" or when >= parse_when(low)) and (high == "*" or when <= parse_when(high))
    for op in (">=", "<=", ">", "<"):
        if spec.startswith(op):
            bound = parse_when(spec[len(op) :])
            return {">=": when >= bound, "<=": when <= bound, ">": when > bound, "<": when < bound}[
                op
            ]
    return when.date() == parse_when(spec).date()


class FakeGitHub(FakeProvider):
    """GitHub with an in-memory corpus of repositories, issues/PRs, code and commits."""

    name = "github"

    def __init__(self) -> None:
        super().__init__()
        self.route("GET", r"/user/repos", self._user_repos)
        self.route("GET", r"/search/(issues|code|commits|repositories)", self._search)
        self.reset()

    def reset(self) -> None:
        """Empty corpus, complete results."""
        super().reset()
        self.repos: list[dict[str, Any]] = []
        self.items: dict[str, list[dict[str, Any]]] = {
            "issues": [],
            "code": [],
            "commits": [],
            "repositories": [],
        }
        self.incomplete = False

    # ---- seeding --------------------------------------------------------------------------
    def add_repo(
        self,
        full_name: str,
        *,
        pushed_at: str = "2024-01-01T00:00:00Z",
        affiliated: bool = True,
        description: str = "",
    ) -> dict[str, Any]:
        """A repository (affiliated ones are listed by /user/repos)."""
        owner = full_name.split("/")[0]
        repo = {
            "id": len(self.repos) + 1,
            "name": full_name.split("/")[1],
            "full_name": full_name,
            "owner": {"login": owner},
            "html_url": f"https://github.com/{full_name}",
            "description": description,
            "private": True,
            "pushed_at": pushed_at,
            "updated_at": pushed_at,
            "created_at": "2020-01-01T00:00:00Z",
            "score": 1.0,
        }
        self.repos.append({**repo, "_affiliated": affiliated})
        self.items["repositories"].append(repo)
        return repo

    def add_issue(
        self,
        repo: str,
        number: int,
        title: str,
        body: str = "",
        *,
        updated_at: str = "2024-01-01T00:00:00Z",
        pull: bool = False,
        user: str = "octocat",
    ) -> None:
        """An issue (or a pull request when `pull`)."""
        kind = "pull" if pull else "issues"
        item: dict[str, Any] = {
            "id": number * 1000,
            "number": number,
            "title": title,
            "body": body,
            "state": "open",
            "html_url": f"https://github.com/{repo}/{kind}/{number}",
            "repository_url": f"https://api.github.com/repos/{repo}",
            "user": {"login": user},
            "labels": [],
            "comments": 0,
            "created_at": updated_at,
            "updated_at": updated_at,
            "closed_at": None,
            "score": 1.0,
        }
        if pull:
            item["pull_request"] = {"url": "", "html_url": item["html_url"], "merged_at": None}
        self.items["issues"].append(item)

    def add_code(self, repo: str, path: str, content: str) -> None:
        """A file on the default branch."""
        self.items["code"].append(
            {
                "name": path.rsplit("/", 1)[-1],
                "path": path,
                "sha": f"sha-{path}",
                "html_url": f"https://github.com/{repo}/blob/main/{path}",
                "repository": {"full_name": repo, "owner": {"login": repo.split("/")[0]}},
                "score": 1.0,
                "_content": content,
                "text_matches": [
                    {
                        "object_type": "FileContent",
                        "property": "content",
                        "fragment": content[:120],
                        "matches": [],
                    }
                ],
            }
        )

    def add_commit(
        self, repo: str, sha: str, message: str, *, date: str, author: str = "octocat"
    ) -> None:
        """A commit on the default branch."""
        self.items["commits"].append(
            {
                "sha": sha,
                "html_url": f"https://github.com/{repo}/commit/{sha}",
                "commit": {
                    "message": message,
                    "author": {"name": author, "email": f"{author}@x", "date": date},
                    "committer": {"name": author, "email": f"{author}@x", "date": date},
                },
                "author": {"login": author},
                "committer": {"login": author},
                "repository": {"full_name": repo},
                "score": 1.0,
            }
        )

    # ---- routes ---------------------------------------------------------------------------
    def _user_repos(self, request: Request, _: re.Match[str]) -> Response:
        repos = sorted(
            (r for r in self.repos if r["_affiliated"]), key=lambda r: r["pushed_at"], reverse=True
        )
        public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in repos]
        return self._paged(request, "/user/repos", public)

    def _paged(
        self, request: Request, path: str, items: list[Any], wrap: dict[str, Any] | None = None
    ) -> Response:
        per_page = min(int(request.arg("per_page", "30")), 100)
        page = int(request.arg("page", "1"))
        chunk = items[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(items):
            params = {k: v[0] for k, v in request.query.items()} | {"page": str(page + 1)}
            headers["Link"] = f'<{self.base_url}{path}?{urlencode(params)}>; rel="next"'
        body: Any = chunk if wrap is None else {**wrap, "items": chunk}
        return Response.json(body, headers=headers)

    def _search(self, request: Request, found: re.Match[str]) -> Response:
        kind = found.group(1)
        q = request.arg("q")
        parsed = parse_q(q)
        error = self._validate(kind, q, parsed, request)
        if error:
            return Response.json(
                {"message": "Validation Failed", "errors": [{"message": error, "code": "invalid"}]},
                422,
            )
        found_items = [i for i in self.items[kind] if self._match(kind, i, parsed)]
        found_items.sort(key=lambda i: -float(i["score"]))  # best match first; stable on ties
        hits = [self._public(i) for i in found_items]
        wrap = {"total_count": len(hits), "incomplete_results": self.incomplete}
        return self._paged(request, f"/search/{kind}", hits, wrap)

    @staticmethod
    def _validate(kind: str, q: str, parsed: ParsedQ, request: Request) -> str:
        if not q.strip():
            return "q is required"
        if parsed.operators > 5:
            return "more than five AND / OR / NOT operators"
        if kind == "code" and len(q.encode()) > 1000:
            return "query is too long"
        if int(request.arg("page", "1")) * min(int(request.arg("per_page", "30")), 100) > 1000:
            return "Only the first 1000 search results are available"
        return ""

    @staticmethod
    def _public(item: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in item.items() if not k.startswith("_")}

    def _match(self, kind: str, item: dict[str, Any], parsed: ParsedQ) -> bool:
        if kind == "code" and parsed.operators:
            return False  # live: code search answers `a OR b` with 200 and no results
        repo = _repo_name(item)
        quals = parsed.qualifiers
        if "repo" in quals and repo not in quals["repo"]:
            return False
        owners = quals.get("org", []) + quals.get("user", [])
        if owners and repo.split("/")[0] not in owners:
            return False
        if not self._typed(kind, item, quals):
            return False
        when_key = {"issues": "updated", "commits": "author-date", "repositories": "pushed"}
        qualifier = when_key.get(kind)
        if qualifier and qualifier in quals:
            when = _when(kind, item)
            if not all(in_range(spec, when) for spec in quals[qualifier]):
                return False
        author = quals.get("author", [])
        login = (item.get("user") or item.get("author") or {}).get("login", "")
        if author and login not in author:
            return False
        hay = _haystack(kind, item)
        return any(matches_all(group, hay) for group in parsed.groups)

    @staticmethod
    def _typed(kind: str, item: dict[str, Any], quals: dict[str, list[str]]) -> bool:
        if kind != "issues":
            return True
        wanted = {v.lower() for v in quals.get("is", []) + quals.get("type", [])}
        is_pull = "pull_request" in item
        if wanted & {"pr", "pull-request"} and not is_pull:
            return False
        return not ("issue" in wanted and is_pull)


def _repo_name(item: dict[str, Any]) -> str:
    if "repository" in item:
        return str(item["repository"]["full_name"])
    if "repository_url" in item:
        return "/".join(str(item["repository_url"]).split("/")[-2:])
    return str(item.get("full_name", ""))


def _when(kind: str, item: dict[str, Any]) -> datetime | None:
    raw = {
        "issues": item.get("updated_at"),
        "commits": item["commit"]["author"]["date"] if kind == "commits" else None,
        "repositories": item.get("pushed_at"),
    }.get(kind)
    return parse_when(raw) if raw else None


def _haystack(kind: str, item: dict[str, Any]) -> str:
    if kind == "issues":
        return f"{item['title']} {item['body']}"
    if kind == "code":
        return f"{item['path']} {item['_content']}"
    if kind == "commits":
        return str(item["commit"]["message"])
    return f"{item['full_name']} {item.get('description') or ''}"
