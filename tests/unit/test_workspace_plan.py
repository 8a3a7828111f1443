"""Validation and expansion of workspace searches (service.workspace.plan)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from service.errors import InvalidArgument, InvalidPageToken
from service.ranking.tokens import TokenSigner
from service.timerange import TimeRange
from service.workspace.model import Account, Kind, ProviderId
from service.workspace.paging import (
    ListState,
    PageState,
    cursor_binding,
    encode_cursor,
    encode_page_token,
)
from service.workspace.plan import NativeQuery, Plan, SearchRequest, build_plan
from service.workspace.providers import REGISTRY

SIGNER = TokenSigner(b"k" * 32)
GH = ProviderId.GITHUB
SLACK = ProviderId.SLACK
DAY = TimeRange(datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 1, 2, tzinfo=UTC))


def _account(account_id: str, provider: ProviderId, tenant: str = "t1") -> Account:
    return Account(account_id, tenant, provider, account_id.upper(), "https://example.com")


ACCOUNTS = [
    _account("gh1", GH),
    _account("gh2", GH),
    _account("sl1", SLACK),
    _account("sl2", SLACK),
]


def plan(
    *queries: NativeQuery, tenant: str = "t1", accounts: list[Account] = ACCOUNTS, **options: Any
) -> Plan:
    request = SearchRequest(tuple(queries), **options)
    return build_plan(tenant, request, accounts, REGISTRY, SIGNER)


def violations(*queries: NativeQuery, **options: Any) -> list[tuple[str, str]]:
    with pytest.raises(InvalidArgument) as caught:
        plan(*queries, **options)
    return [(v.field, v.reason) for v in caught.value.violations]


def q(provider: ProviderId | None, text: str = "x", **fields: object) -> NativeQuery:
    return NativeQuery(provider, text, **fields)  # type: ignore[arg-type]


def test_expands_accountless_queries_to_every_account_of_the_provider() -> None:
    result = plan(q(SLACK, " deploy   freeze "), q(GH, "bug", account_id="gh2", kind=Kind.ISSUES))
    slots = [(s.index, s.query_index, s.account.account_id) for s in result.slots]
    assert slots == [(0, 0, "sl1"), (1, 0, "sl2"), (2, 1, "gh2")]
    assert result.slots[0].query.text == "deploy freeze"
    assert result.top_k == 10
    assert result.max_pages == 1
    assert result.unmatched == ()


def test_a_query_reaching_no_account_is_unmatched_not_invalid() -> None:
    result = plan(q(ProviderId.GMAIL, "from:me"))
    assert result.slots == ()
    assert result.unmatched == ((0, ProviderId.GMAIL, ""),)


def test_kind_is_dropped_for_providers_without_kinds() -> None:
    result = plan(q(SLACK, "a", kind=Kind.CODE))
    assert {s.query.kind for s in result.slots} == {None}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        (q(None), "queries[0].provider"),
        (q(GH, kind=Kind.MERGE_REQUESTS), "queries[0].kind"),
        (q(GH, "a" * 257), "queries[0].text"),
        (q(SLACK, "a" * 2001), "queries[0].text"),
        (q(SLACK, "   "), "queries[0].text"),
        (q(SLACK, time_range=TimeRange(DAY.end, DAY.start)), "queries[0].time_range"),
        (q(SLACK, time_range=TimeRange(DAY.start, DAY.start)), "queries[0].time_range"),
        (q(SLACK, project="p" * 301), "queries[0].project"),
        (q(SLACK, account_id="nope"), "queries[0].account_id"),
        (q(SLACK, account_id="gh1"), "queries[0].account_id"),
    ],
)
def test_each_query_rule_names_its_field(query: NativeQuery, field: str) -> None:
    assert violations(query) == [(field, "")]


def test_empty_text_is_fine_with_a_time_range() -> None:
    assert len(plan(q(SLACK, "", time_range=DAY)).slots) == 2


def test_another_tenants_account_is_an_unknown_account() -> None:
    with pytest.raises(InvalidArgument) as caught:
        build_plan("t2", SearchRequest((q(SLACK, account_id="sl1"),)), [], REGISTRY, SIGNER)
    assert caught.value.violations[0].field == "queries[0].account_id"


@pytest.mark.parametrize(
    ("options", "field"),
    [({"top_k": 51}, "top_k"), ({"top_k": -1}, "top_k"), ({"max_pages": 11}, "max_pages")],
)
def test_request_limits(options: dict[str, int], field: str) -> None:
    assert violations(q(SLACK), **options) == [(field, "")]


def test_defaults_and_bounds_of_top_k_and_max_pages() -> None:
    result = plan(q(SLACK), top_k=50, max_pages=10)
    assert (result.top_k, result.max_pages) == (50, 10)


def test_no_queries_or_too_many_is_invalid_on_the_queries_field() -> None:
    assert violations() == [("queries", "")]
    with pytest.raises(InvalidArgument) as caught:  # never RESOURCE_EXHAUSTED: no retry helps
        plan(*(q(SLACK, f"t{i}") for i in range(33)))
    assert [v.field for v in caught.value.violations] == ["queries"]
    assert caught.value.metadata["limit"] == "32"


def test_duplicates_compare_normalised_text_on_overlapping_accounts() -> None:
    found = violations(q(SLACK, "Deploy  Freeze", account_id="sl1"), q(SLACK, " deploy freeze"))
    assert found == [("queries[1]", "")]
    # Kind is ignored for providers without kinds.
    assert violations(q(SLACK, "a", kind=Kind.CODE), q(SLACK, "a"))[0][0] == "queries[1]"
    assert violations(q(SLACK, "a", account_id="sl2"), q(SLACK, "a", account_id="sl2")) == [
        ("queries[1]", ""),
    ]


def test_the_same_text_on_two_different_accounts_is_not_a_duplicate() -> None:
    result = plan(q(SLACK, "deploy", account_id="sl1"), q(SLACK, "deploy", account_id="sl2"))
    assert [(s.query_index, s.account.account_id) for s in result.slots] == [
        (0, "sl1"), (1, "sl2"),
    ]
    github = plan(q(GH, "bug", account_id="gh1", kind=Kind.ISSUES),
                  q(GH, "bug", account_id="gh2", kind=Kind.ISSUES))
    assert len(github.slots) == 2


def test_a_cursor_narrows_a_query_to_its_account_for_duplicates() -> None:
    result = plan(
        q(SLACK, "deploy", cursor=_cursor("deploy")), q(SLACK, "deploy", account_id="sl1")
    )
    assert [s.account.account_id for s in result.slots] == ["sl2", "sl1"]


def test_text_is_compared_exactly_where_operators_are_case_sensitive() -> None:
    gmail = ProviderId.GMAIL  # upper-case OR is an operator, lower-case `or` a word
    assert plan(q(gmail, "budget OR forecast"), q(gmail, "budget or forecast")).unmatched == (
        (0, gmail, ""), (1, gmail, ""),
    )
    assert violations(q(gmail, "budget OR forecast"), q(gmail, "budget  OR forecast")) == [
        ("queries[1]", ""),
    ]
    jira = ProviderId.JIRA  # quoted values (labels, account ids) are case-sensitive
    assert len(plan(q(jira, "labels = Beta"), q(jira, "labels = beta")).unmatched) == 2
    calendar = ProviderId.GOOGLE_CALENDAR  # plain words matched regardless of case
    assert violations(q(calendar, "Standup"), q(calendar, "standup")) == [("queries[1]", "")]


@pytest.mark.parametrize(
    ("provider", "ignores_case"),
    [(GH, False), (ProviderId.GITLAB, False), (SLACK, True), (ProviderId.GOOGLE_DRIVE, False),
     (ProviderId.GMAIL, False), (ProviderId.GOOGLE_CALENDAR, True), (ProviderId.JIRA, False),
     (ProviderId.CONFLUENCE, False)],
)
def test_which_providers_compare_text_ignoring_case(
    provider: ProviderId, ignores_case: bool
) -> None:
    assert REGISTRY[provider].text_ignores_case is ignores_case


def test_github_counts_free_text_only_against_its_256_characters() -> None:
    qualifiers = " repo:acme/a-long-repository-name is:open label:bug author:octocat"
    text = "a" * 250 + qualifiers
    assert len(text) > 256
    assert len(plan(q(GH, text, kind=Kind.ISSUES)).slots) == 2
    assert violations(q(GH, "a" * 257 + qualifiers)) == [("queries[0].text", "")]
    assert violations(q(GH, "repo:a/b " * 250)) == [("queries[0].text", "")]  # over 2000 in all


def test_github_code_search_with_booleans_is_refused_on_its_text() -> None:
    with pytest.raises(InvalidArgument) as caught:
        plan(q(GH, "login OR signin", kind=Kind.CODE))
    (violation,) = caught.value.violations
    assert violation.field == "queries[0].text"
    assert "AND/OR/NOT" in violation.description
    assert "separate calls" in violation.description
    for text in ("login AND signin", "NOT login"):
        assert violations(q(GH, text, kind=Kind.CODE)) == [("queries[0].text", "")]
    fine = plan(
        q(GH, '"login OR signin"', account_id="gh1", kind=Kind.CODE),  # a phrase, no operator
        q(GH, "login or signin", account_id="gh2", kind=Kind.CODE),  # lower case: words
        q(GH, "login OR signin", account_id="gh1", kind=Kind.ISSUES),
        q(GH, "login OR signin", account_id="gh2", kind=Kind.ISSUES),
    )
    assert len(fine.slots) == 4
    assert len(plan(q(GH, "login OR signin")).slots) == 2  # kindless: the code leg is skipped


def test_github_takes_one_query_per_kind_per_account() -> None:
    ok = plan(q(GH, "a", kind=Kind.ISSUES), q(GH, "b", kind=Kind.CODE))
    assert len(ok.slots) == 4
    same_kind = violations(q(GH, "a", kind=Kind.ISSUES), q(GH, "b", kind=Kind.ISSUES))
    assert same_kind == [("queries[1].kind", "")]
    kindless = violations(q(GH, "a", account_id="gh1"), q(GH, "b", kind=Kind.CODE))
    assert kindless == [("queries[1].kind", "")]
    other_accounts = plan(
        q(GH, "a", account_id="gh1", kind=Kind.CODE), q(GH, "b", account_id="gh2", kind=Kind.CODE)
    )
    assert [s.account.account_id for s in other_accounts.slots] == ["gh1", "gh2"]


def test_at_most_four_queries_per_account_counting_accountless_ones() -> None:
    on_sl1 = [q(SLACK, f"t{i}", account_id="sl1") for i in range(3)]
    fine = plan(*on_sl1, q(SLACK, "all"), q(SLACK, "b", account_id="sl2"))
    assert len(fine.slots) == 6
    found = violations(*on_sl1, q(SLACK, "all"), q(SLACK, "one more", account_id="sl1"))
    assert found == [("queries[4]", "")]
    assert violations(*(q(SLACK, f"t{i}") for i in range(6))) == [
        ("queries[4]", ""), ("queries[5]", ""),
    ]


def test_one_violation_per_offending_query_across_queries() -> None:
    found = violations(q(None), q(SLACK, ""), q(SLACK, "ok"), q(SLACK, "OK"), top_k=99)
    assert [f for f, _ in found] == ["top_k", "queries[0].provider", "queries[1].text",
                                     "queries[3]"]


def _cursor(text: str, account_id: str = "sl2", tenant: str = "t1") -> str:
    binding = cursor_binding(tenant, SLACK, account_id, text, None, TimeRange(), "")
    return encode_cursor(SIGNER, binding, ListState("c2", 20, 10), account_id)


def test_a_cursor_targets_its_account_and_sets_the_start() -> None:
    result = plan(q(SLACK, "deploy", cursor=_cursor("deploy")))
    assert [s.account.account_id for s in result.slots] == ["sl2"]
    assert result.slots[0].start == ListState("c2", 20, 10)


@pytest.mark.parametrize(
    "cursor",
    [_cursor("other text"), _cursor("deploy", tenant="t2"), _cursor("deploy", "sl9")[:-2] + "AA",
     "junk"],
)
def test_a_cursor_bound_to_something_else_is_rejected(cursor: str) -> None:
    with pytest.raises(InvalidPageToken) as caught:
        plan(q(SLACK, "deploy", cursor=cursor))
    assert [(v.field, v.reason) for v in caught.value.violations] == [
        ("queries[0].cursor", "PAGE_TOKEN_INVALID")
    ]


def test_a_cursor_of_an_account_no_longer_connected_is_unmatched_not_invalid() -> None:
    result = plan(q(SLACK, "deploy", cursor=_cursor("deploy", "sl9")), q(SLACK, "freeze"))
    assert result.unmatched == ((0, SLACK, "sl9"),)
    assert [s.key for s in result.slots] == [(1, "sl1"), (1, "sl2")]
    named = plan(q(SLACK, "deploy", account_id="sl9", cursor=_cursor("deploy", "sl9")))
    assert named.unmatched == ((0, SLACK, "sl9"),)


def test_a_cursor_for_another_account_than_the_one_named_is_rejected() -> None:
    with pytest.raises(InvalidPageToken):
        plan(q(SLACK, "deploy", account_id="sl1", cursor=_cursor("deploy", "sl2")))


def test_page_tokens_are_bound_to_tenant_queries_and_top_k() -> None:
    first = plan(q(SLACK, "deploy"))
    state = PageState((ListState(), ListState()), ("AAAAAAAA",), 2, ((0, "sl1"), (0, "sl2")))
    token = encode_page_token(SIGNER, first.binding, state)
    again = plan(q(SLACK, "deploy"), page_token=token)
    assert again.resume == state
    for options in ({"top_k": 5}, {"tenant": "t2"}):
        with pytest.raises(InvalidPageToken) as caught:
            plan(q(SLACK, "deploy"), page_token=token, **options)
        assert caught.value.violations[0].field == "page_token"
    with pytest.raises(InvalidPageToken):
        plan(q(SLACK, "deploy", account_id="sl1"), page_token=token)
    with pytest.raises(InvalidPageToken):
        plan(q(SLACK, "deploy"), page_token=token[:-2])


def test_a_page_token_outlives_accounts_connected_and_disconnected() -> None:
    """A token is bound to the request, not to the accounts it reached: connecting or
    disconnecting an account between pages made every token of the provider's queries
    "belongs to another request". Now a new account's lists start from their first page, and
    a disconnected account's lists end with a SKIPPED status naming the account; an explicit
    account_id disconnected since the first page is SKIPPED too, not INVALID_ARGUMENT."""
    queries = (q(SLACK, "deploy"), q(SLACK, "freeze", account_id="sl2"))
    first = plan(*queries)
    keys = tuple(s.key for s in first.slots)
    assert keys == ((0, "sl1"), (0, "sl2"), (1, "sl2"))
    lists = (ListState("p1", 10), ListState("p2", 10), ListState("p3", 10))
    token = encode_page_token(SIGNER, first.binding, PageState(lists, (), 2, keys))
    changed = [_account("sl0", SLACK), _account("sl1", SLACK), *ACCOUNTS[:2]]  # sl2 gone
    later = plan(*queries, page_token=token, accounts=changed)
    assert [s.key for s in later.slots] == [(0, "sl0"), (0, "sl1")]
    assert later.resume is not None
    assert later.resume.resume_of((0, "sl1")) == lists[0]
    assert later.resume.resume_of((0, "sl0")) is None
    assert later.unmatched == ((1, SLACK, "sl2"), (0, SLACK, "sl2"))
    with pytest.raises(InvalidArgument):
        plan(*queries, accounts=changed)  # without a token, an unknown account is an error
