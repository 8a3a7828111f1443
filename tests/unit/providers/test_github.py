"""GitHub adapter: query planning, request building and parsing of recorded answers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from service.workspace.model import Kind, ProviderError, ProviderQuery, QueryState, TimeRange
from service.workspace.providers import github
from tests.unit.providers.recorded_data import load

MARCH = TimeRange(datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 4, 1, tzinfo=UTC))


def test_kindless_searches_issues_and_code() -> None:
    kinds, skipped = github.plan_kinds(ProviderQuery("login bug"))
    assert kinds == [Kind.ISSUES, Kind.CODE]
    assert skipped == {}


@pytest.mark.parametrize("text", ["login OR signin", "login AND NOT signup", "(a OR b) repo:x/y"])
def test_kindless_with_booleans_skips_code_and_says_why(text: str) -> None:
    kinds, skipped = github.plan_kinds(ProviderQuery(text))
    assert kinds == [Kind.ISSUES]
    assert "AND/OR/NOT" in skipped["code"]


def test_booleans_inside_quotes_do_not_count() -> None:
    kinds, _ = github.plan_kinds(ProviderQuery('"this OR that"'))
    assert Kind.CODE in kinds


def test_kindless_with_dates_skips_code() -> None:
    kinds, skipped = github.plan_kinds(ProviderQuery("login", time_range=MARCH))
    assert kinds == [Kind.ISSUES]
    assert "no dates" in skipped["code"]


def test_code_with_dates_fails() -> None:
    with pytest.raises(ProviderError) as caught:
        github.plan_kinds(ProviderQuery("login", kind=Kind.CODE, time_range=MARCH))
    assert caught.value.state is QueryState.FAILED


@pytest.mark.parametrize("text", ["login OR signin", "login AND signin", "NOT login repo:a/b"])
def test_code_with_booleans_is_refused_before_any_request(text: str) -> None:
    assert "separate calls" in github.check_text(text, Kind.CODE)
    with pytest.raises(ProviderError) as caught:
        github.plan_kinds(ProviderQuery(text, kind=Kind.CODE))
    assert caught.value.state is QueryState.FAILED
    assert caught.value.message == github.CODE_BOOLEANS


@pytest.mark.parametrize(
    ("text", "kind"),
    [("login OR signin", None), ("login OR signin", Kind.ISSUES), ('"a OR b"', Kind.CODE),
     ("login or signin", Kind.CODE), ("label:OR", Kind.CODE)],
)
def test_booleans_work_elsewhere(text: str, kind: Kind | None) -> None:
    assert github.check_text(text, kind) == ""


def test_gitlab_kind_is_refused() -> None:
    with pytest.raises(ProviderError):
        github.plan_kinds(ProviderQuery("x", kind=Kind.WIKI))


def test_issue_kind_splits_issues_and_pull_requests_with_date_range() -> None:
    plan = github.build_plan(ProviderQuery("login", kind=Kind.ISSUES, time_range=MARCH), None)
    assert [leg.q for leg in plan.legs] == [
        "login is:issue updated:2024-03-01T00:00:00Z..2024-04-01T00:00:00Z",
        "login is:pull-request updated:2024-03-01T00:00:00Z..2024-04-01T00:00:00Z",
    ]


def test_typed_issue_query_is_not_split_and_keeps_own_date() -> None:
    query = ProviderQuery("is:pr updated:>2024-01-01 login", kind=Kind.ISSUES, time_range=MARCH)
    plan = github.build_plan(query, None)
    assert [leg.q for leg in plan.legs] == ["is:pr updated:>2024-01-01 login"]


def test_open_date_bounds_and_commit_qualifier() -> None:
    start_only = TimeRange(start=datetime(2024, 3, 1, tzinfo=UTC))
    end_only = TimeRange(end=datetime(2024, 3, 1, tzinfo=UTC))
    assert github.date_qualifier(Kind.COMMITS, start_only, "fix") == (
        "author-date:>=2024-03-01T00:00:00Z"
    )
    assert (
        github.date_qualifier(Kind.REPOSITORIES, end_only, "api") == "pushed:<2024-03-01T00:00:00Z"
    )


def test_boolean_text_is_parenthesised_before_qualifiers() -> None:
    assert github.compose_q("a OR b", ["repo:x/y", "is:issue"]) == "(a OR b) repo:x/y is:issue"
    assert github.compose_q("(a OR b)", ["is:issue"]) == "(a OR b) is:issue"
    assert github.compose_q("a b", ["is:issue"]) == "a b is:issue"


def test_affiliated_repos_become_repo_batches_within_code_limit() -> None:
    repos = [f"some-organisation/a-rather-long-repository-name-{i:03d}" for i in range(100)]
    plan = github.build_plan(ProviderQuery("token"), repos)
    code_legs = [leg for leg in plan.legs if leg.kind is Kind.CODE]
    issue_legs = [leg for leg in plan.legs if leg.kind is Kind.ISSUES]
    assert all(len(leg.q.encode()) <= github.CODE_Q_BYTES for leg in code_legs)
    assert len(code_legs) == github.MAX_BATCHES
    assert any("covered only" in note for note in plan.coverage)
    assert len(issue_legs) == 4  # is:issue + is:pull-request, two batches each
    assert all(len(leg.q.encode()) <= github.OTHER_Q_BYTES for leg in issue_legs)
    assert sum(leg.q.count("repo:") for leg in issue_legs if "is:issue" in leg.q) == 100


def test_free_text_excludes_qualifiers_and_operators() -> None:
    assert github.free_text('login OR "sign in" repo:a/b is:open (x)') == 'login "sign in" x'
    assert github.free_text("repo:a/b author:@me") == ""
    assert len(github.free_text("x" * 300 + " repo:a/b")) == 300
    assert github.search_text_length("x" * 250 + " repo:acme/api is:open label:bug") == 250


def test_scoping_detection() -> None:
    assert github.is_scoped("bug repo:acme/api")
    assert github.is_scoped("org:acme bug")
    assert not github.is_scoped("bug -repo:acme/api")
    assert not github.is_scoped("bug author:jane")


def test_search_request_params() -> None:
    leg = github.Leg(Kind.COMMITS, "fix author:jane", "commits search")
    assert github.search_request(leg, page=3, per_page=20) == (
        "/search/commits",
        {"q": "fix author:jane", "per_page": 20, "page": 3},
    )


def test_parse_issues_and_pull_requests() -> None:
    documents, total, incomplete = github.parse_search(Kind.ISSUES, load("github_search_issues"))
    assert (total, incomplete) == (1200, True)
    issue, pull = documents
    assert issue.id == "42"
    assert issue.title == "acme/api · Login fails after token refresh"
    assert issue.url == "https://github.com/acme/api/issues/42"
    assert issue.kind == "issue"
    assert issue.container == "acme/api"
    assert issue.author == "octocat"
    assert issue.modified_at == datetime(2024, 3, 5, 17, 30, tzinfo=UTC)
    assert pull.kind == "pull_request"
    assert pull.content == "Fix login redirect"  # null body falls back to the title
    assert pull.modified_at == datetime(2024, 2, 2, 8, 0, tzinfo=UTC)
    assert pull.modified_at is not None
    assert pull.modified_at.tzinfo is UTC


def test_parse_code_uses_text_match_fragments_and_has_no_date() -> None:
    (document,), total, _ = github.parse_search(Kind.CODE, load("github_search_code"))
    assert total == 1
    assert document.id == "src/auth.py"
    assert document.title == "acme/api · src/auth.py"
    assert document.content == "def refresh_token(session):\n…\n    return login(session)"
    assert document.modified_at is None


def test_parse_commits_uses_author_date() -> None:
    (document,), _, _ = github.parse_search(Kind.COMMITS, load("github_search_commits"))
    assert document.id == "bb4cc8d3b2e14b3af5df699876dd4ff3acd00b7f"
    assert document.title == "acme/api · Fix token refresh"
    assert document.author == "janedoe"
    assert document.modified_at == datetime(2024, 1, 10, 20, 0, tzinfo=UTC)


def test_parse_repositories() -> None:
    (document,), _, _ = github.parse_search(Kind.REPOSITORIES, load("github_search_repositories"))
    assert (document.id, document.title, document.author) == ("acme/api", "acme/api", "acme")
    assert document.content == "The Acme API"
    assert document.modified_at == datetime(2024, 3, 9, 8, 0, tzinfo=UTC)


def test_parse_repos_skips_entries_without_name() -> None:
    assert github.parse_repos(load("github_user_repos")) == ["acme/api", "acme/web"]


def test_unexpected_shape_fails() -> None:
    with pytest.raises(ProviderError) as caught:
        github.parse_search(Kind.ISSUES, ["not", "an", "object"])
    assert caught.value.state is QueryState.FAILED


def test_next_page_stops_at_the_reachable_thousand() -> None:
    assert github.has_next_page(1, 30, 1200)
    assert not github.has_next_page(10, 100, 1200)
    assert not github.has_next_page(2, 30, 60)
    assert not github.has_next_page(1, 30, None)
