"""Jira and Confluence adapters: sites, JQL/CQL with dates, parsing of recorded answers."""

from __future__ import annotations

from datetime import UTC, datetime

from service.workspace.model import ProviderQuery, TimeRange
from service.workspace.providers import confluence, jira
from service.workspace.providers._atlassian import Site, parse_sites
from service.workspace.providers._common import and_clauses, split_order_by
from tests.unit.providers.recorded_data import load

SITE = Site("1324a887", "https://acme.atlassian.net", "/ex/jira/1324a887")
WIKI = Site("1324a887", "https://acme.atlassian.net", "/ex/confluence/1324a887")
MARCH = TimeRange(datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 4, 1, tzinfo=UTC))


def test_sites_filtered_by_product_scopes() -> None:
    resources = load("atlassian_resources")
    assert [s.url for s in parse_sites(resources, "jira")] == ["https://acme.atlassian.net"]
    wiki = parse_sites(resources, "confluence")
    assert [s.api_prefix for s in wiki] == [
        "/ex/confluence/1324a887-45db-1bf4-1e99-ef0ff456d421",
        "/ex/confluence/9bd0a2f2-0000-4000-8000-000000000002",
    ]


def test_order_by_split_ignores_quoted_text() -> None:
    assert split_order_by('text ~ "order by x" ORDER BY updated DESC') == (
        'text ~ "order by x"',
        "ORDER BY updated DESC",
    )
    assert split_order_by("project = ENG") == ("project = ENG", "")


def test_jql_dates_are_widened_and_inserted_before_order_by() -> None:
    query = ProviderQuery(
        'text ~ "deploy" OR summary ~ "ship" ORDER BY updated DESC', time_range=MARCH
    )
    assert jira.build_jql(query) == (
        '(text ~ "deploy" OR summary ~ "ship") AND updated >= "2024-02-29" '
        'AND updated <= "2024-04-02" ORDER BY updated DESC'
    )
    assert jira.build_jql(ProviderQuery("ORDER BY updated", time_range=MARCH)) == (
        'updated >= "2024-02-29" AND updated <= "2024-04-02" ORDER BY updated'
    )
    assert and_clauses("project = ENG", []) == "project = ENG"


def test_jira_request_body() -> None:
    path, body = jira.build_request(ProviderQuery("project = ENG", limit=7), SITE, "tok")
    assert path == "/ex/jira/1324a887/rest/api/3/search/jql"
    assert body == {
        "jql": "project = ENG",
        "maxResults": 7,
        "fields": ["summary", "description", "updated", "creator", "status", "comment"],
        "nextPageToken": "tok",
    }


def test_parse_jira_issues() -> None:
    result = jira.parse_response(load("jira_search_jql"), SITE)
    (doc,) = result.documents
    assert doc.id == "ENG-12"
    assert doc.title == "ENG-12: Deployment fails on staging"
    assert doc.url == "https://acme.atlassian.net/browse/ENG-12"
    assert doc.content == (
        "Deployment fails on staging\nThe deploy step times out.\nretry\nStatus: In Progress\n"
        "Seen again today"
    )
    assert doc.modified_at == datetime(2024, 3, 5, 9, 15, tzinfo=UTC)
    assert doc.author == "Jane Doe"
    assert doc.container == "1324a887"
    assert result.next_token == "CAEaAggD"


def test_jira_last_page_has_no_token() -> None:
    assert (
        jira.parse_response({"issues": [], "nextPageToken": "x", "isLast": True}, SITE).next_token
        is None
    )
    assert jira.parse_response({"issues": []}, SITE).next_token is None


def test_cql_default_and_dates() -> None:
    assert confluence.build_cql(ProviderQuery("")) == "type IN (page, blogpost)"
    assert confluence.build_cql(ProviderQuery('text ~ "roadmap"', time_range=MARCH)) == (
        '(text ~ "roadmap") AND lastmodified >= "2024-02-29" AND lastmodified <= "2024-04-02"'
    )


def test_confluence_request() -> None:
    path, params = confluence.build_request(ProviderQuery("space = ENG", limit=3), WIKI, "c1")
    assert path == "/ex/confluence/1324a887/wiki/rest/api/search"
    assert params == {
        "cql": "space = ENG",
        "limit": 3,
        "expand": "content.version,content.space",
        "cursor": "c1",
    }


def test_parse_confluence_keeps_pages_and_spaces_and_reports_others() -> None:
    result = confluence.parse_response(load("confluence_search"), WIKI)
    page, space = result.documents
    assert page.id == "98306"
    assert page.kind == "page"
    assert page.url == "https://acme.atlassian.net/wiki/spaces/ENG/pages/98306/Roadmap+2024"
    assert page.content == "The roadmap for 2024"
    assert page.author == "Jane Doe"
    assert page.modified_at == datetime(2024, 3, 2, 9, tzinfo=UTC)
    assert space.id == "space:ENG"
    assert space.url == "https://acme.atlassian.net/wiki/spaces/ENG"
    assert "1 attachment" in result.message
    assert result.next_token == "_f_MjU=_sa_WyJcdDEwIl0="
