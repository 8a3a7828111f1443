"""Fake GitLab REST API v4: member projects, one project, and project search by scope."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from service.fakes.base import FakeProvider, matches_all, words
from service.fakes.server import Request, Response

SCOPES = (
    "issues",
    "merge_requests",
    "milestones",
    "notes",
    "wiki_blobs",
    "commits",
    "blobs",
    "users",
)


class FakeGitLab(FakeProvider):
    """GitLab with projects and, per project, issues, merge requests, blobs and wiki pages."""

    name = "gitlab"

    def __init__(self) -> None:
        super().__init__()
        self.route("GET", r"/api/v4/projects", self._projects)
        self.route("GET", r"/api/v4/projects/([^/]+)", self._project)
        self.route("GET", r"/api/v4/projects/([^/]+)/search", self._search)
        self.reset()

    def reset(self) -> None:
        """Empty corpus."""
        super().reset()
        self.projects: list[dict[str, Any]] = []
        self.items: list[dict[str, Any]] = []
        self.send_next_page_header = True

    def unauthorized(self) -> Response:
        """GitLab's 401."""
        return Response.json({"message": "401 Unauthorized"}, 401)

    def expired(self) -> Response:
        """GitLab's 401 for an expired OAuth token (lib/api/api_guard.rb)."""
        return Response.json(
            {
                "error": "invalid_token",
                "error_description": "Token is expired. You can either do re-authorization "
                "or token refresh.",
            },
            401,
            {"WWW-Authenticate": 'Bearer realm="Protected by OAuth 2.0", error="invalid_token"'},
        )

    # ---- seeding --------------------------------------------------------------------------
    def add_project(
        self,
        project_id: int,
        path: str,
        *,
        member: bool = True,
        last_activity_at: str = "2024-01-01T00:00:00Z",
    ) -> None:
        """A project (members see it in /projects?membership=true)."""
        self.projects.append(
            {
                "id": project_id,
                "name": path.rsplit("/", 1)[-1],
                "path_with_namespace": path,
                "web_url": f"https://gitlab.example.com/{path}",
                "default_branch": "main",
                "last_activity_at": last_activity_at,
                "_member": member,
            }
        )

    def add_issue(
        self,
        project_id: int,
        iid: int,
        title: str,
        description: str = "",
        *,
        updated_at: str = "2024-01-01T00:00:00Z",
        merge_request: bool = False,
    ) -> None:
        """An issue or merge request."""
        project = self._by_id(str(project_id))
        assert project is not None
        segment = "merge_requests" if merge_request else "issues"
        self.items.append(
            {
                "_scope": segment,
                "id": iid * 100 + project_id,
                "iid": iid,
                "project_id": project_id,
                "title": title,
                "description": description,
                "state": "opened",
                "created_at": updated_at,
                "updated_at": updated_at,
                "web_url": f"{project['web_url']}/-/{segment}/{iid}",
                "author": {"id": 1, "name": "Jane Doe", "username": "jane"},
                "labels": [],
            }
        )

    def add_blob(self, project_id: int, path: str, data: str, *, wiki: bool = False) -> None:
        """A file (or wiki page) of the project's default branch."""
        self.items.append(
            {
                "_scope": "wiki_blobs" if wiki else "blobs",
                "basename": path.rsplit(".", 1)[0],
                "data": data,
                "path": path,
                "filename": path,
                "id": None,
                "ref": "main",
                "startline": 1,
                "project_id": project_id,
            }
        )

    # ---- routes ---------------------------------------------------------------------------
    def _by_id(self, raw: str) -> dict[str, Any] | None:
        key = unquote(raw)
        for project in self.projects:
            if str(project["id"]) == key or project["path_with_namespace"] == key:
                return project
        return None

    def _paged(self, request: Request, items: list[Any]) -> Response:
        per_page = min(int(request.arg("per_page", "20")), 100)
        page = int(request.arg("page", "1"))
        chunk = items[(page - 1) * per_page : page * per_page]
        more = page * per_page < len(items)
        headers = {"x-page": str(page), "x-per-page": str(per_page), "x-total": str(len(items))}
        if self.send_next_page_header:
            headers["x-next-page"] = str(page + 1) if more else ""
        return Response.json(chunk, headers=headers)

    def _projects(self, request: Request, _: re.Match[str]) -> Response:
        projects = [p for p in self.projects if p["_member"] or request.arg("membership") != "true"]
        projects.sort(key=lambda p: p["last_activity_at"], reverse=True)
        return self._paged(request, [_public(p) for p in projects])

    def _project(self, request: Request, found: re.Match[str]) -> Response:
        project = self._by_id(found.group(1))
        if project is None:
            return Response.json({"message": "404 Project Not Found"}, 404)
        return Response.json(_public(project))

    def _search(self, request: Request, found: re.Match[str]) -> Response:
        project = self._by_id(found.group(1))
        if project is None:
            return Response.json({"message": "404 Project Not Found"}, 404)
        scope, search = request.arg("scope"), request.arg("search")
        if scope not in SCOPES:
            return Response.json({"error": "scope does not have a valid value"}, 400)
        if not search:
            return Response.json({"error": "search is missing"}, 400)
        terms = words(search)
        hits = [
            _public(item)
            for item in self.items
            if item["_scope"] == scope
            and item["project_id"] == project["id"]
            and matches_all(
                terms, *(str(item.get(k) or "") for k in ("title", "description", "data", "path"))
            )
        ]
        return self._paged(request, hits)


def _public(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if not k.startswith("_")}
