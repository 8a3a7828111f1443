"""GitLab adapter: planning, requests and parsing of recorded answers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from service.workspace.model import Kind, ProviderError, ProviderQuery, TimeRange
from service.workspace.providers import gitlab
from tests.unit.providers.recorded_data import load

PROJECT = gitlab.Project("11", "https://gitlab.example.com/acme/api", "acme/api")
JAN = TimeRange(datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 2, 1, tzinfo=UTC))


def test_kindless_searches_issues_code_and_merge_requests() -> None:
    assert gitlab.plan_kinds(ProviderQuery("timeout")) == (
        [Kind.ISSUES, Kind.CODE, Kind.MERGE_REQUESTS],
        {},
    )


def test_kindless_with_dates_skips_code() -> None:
    kinds, skipped = gitlab.plan_kinds(ProviderQuery("timeout", time_range=JAN))
    assert kinds == [Kind.ISSUES, Kind.MERGE_REQUESTS]
    assert "code" in skipped


@pytest.mark.parametrize("kind", [Kind.CODE, Kind.WIKI])
def test_undated_kinds_with_dates_fail(kind: Kind) -> None:
    with pytest.raises(ProviderError):
        gitlab.plan_kinds(ProviderQuery("timeout", kind=kind, time_range=JAN))


def test_github_kind_is_refused() -> None:
    with pytest.raises(ProviderError):
        gitlab.plan_kinds(ProviderQuery("x", kind=Kind.COMMITS))


def test_projects_request_asks_one_more_than_searched() -> None:
    path, params = gitlab.projects_request()
    assert path == "/api/v4/projects"
    assert params == {
        "membership": "true",
        "simple": "true",
        "per_page": 7,
        "order_by": "last_activity_at",
        "sort": "desc",
    }


def test_project_path_encodes_namespaced_paths() -> None:
    assert gitlab.project_path("acme/api") == "/api/v4/projects/acme%2Fapi"
    assert gitlab.project_path("11") == "/api/v4/projects/11"


@pytest.mark.parametrize(
    ("kind", "scope"),
    [
        (Kind.ISSUES, "issues"),
        (Kind.CODE, "blobs"),
        (Kind.MERGE_REQUESTS, "merge_requests"),
        (Kind.WIKI, "wiki_blobs"),
    ],
)
def test_search_request_scope(kind: Kind, scope: str) -> None:
    path, params = gitlab.search_request(gitlab.Leg(PROJECT, kind), "timeout", page=2, per_page=10)
    assert path == "/api/v4/projects/11/search"
    assert params == {"scope": scope, "search": "timeout", "per_page": 10, "page": 2}


def test_parse_projects() -> None:
    projects = gitlab.parse_projects(load("gitlab_projects"))
    assert projects[1] == gitlab.Project("12", "https://gitlab.example.com/acme/web", "acme/web")


def test_parse_issues() -> None:
    (doc,) = gitlab.parse_search(Kind.ISSUES, load("gitlab_search_issues"), PROJECT)
    assert (doc.id, doc.title, doc.kind, doc.container) == ("5", "Timeout on login", "issue", "11")
    assert doc.url == "https://gitlab.example.com/acme/api/-/issues/5"
    assert doc.author == "Jane Doe"
    assert doc.modified_at == datetime(2024, 1, 3, 10, tzinfo=UTC)


def test_parse_merge_requests_fall_back_to_title() -> None:
    (doc,) = gitlab.parse_search(Kind.MERGE_REQUESTS, load("gitlab_search_merge_requests"), PROJECT)
    assert doc.kind == "merge_request"
    assert doc.content == "Raise connection timeout"


def test_parse_blobs_builds_url_from_project_and_ref() -> None:
    (doc,) = gitlab.parse_search(Kind.CODE, load("gitlab_search_blobs"), PROJECT)
    assert doc.id == "config/settings.py"
    assert doc.url == "https://gitlab.example.com/acme/api/-/blob/main/config/settings.py"
    assert doc.title == "acme/api · config/settings.py"
    assert doc.modified_at is None


def test_parse_wiki_blobs_builds_wiki_url() -> None:
    (doc,) = gitlab.parse_search(Kind.WIKI, load("gitlab_search_wiki_blobs"), PROJECT)
    assert doc.url == "https://gitlab.example.com/acme/api/-/wikis/ops/timeouts"
    assert doc.kind == "wiki"


def test_non_array_answer_fails() -> None:
    with pytest.raises(ProviderError):
        gitlab.parse_search(Kind.ISSUES, {"message": "403 Forbidden"}, PROJECT)


def test_next_page_header_or_full_page() -> None:
    assert gitlab.has_next_page({"x-next-page": "3"}, 10, 10)
    assert not gitlab.has_next_page({"x-next-page": ""}, 10, 10)
    assert gitlab.has_next_page({}, 10, 10)
    assert not gitlab.has_next_page({}, 4, 10)
