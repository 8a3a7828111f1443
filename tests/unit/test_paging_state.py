"""Resume state of workspace paging: tokens, cursors, resume points and list runs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.errors import InvalidPageToken
from service.ranking.tokens import TokenSigner
from service.timerange import TimeRange
from service.workspace.lists import ListRun, fusion_key, preview
from service.workspace.model import Account, NativeDocument, ProviderId, ProviderPage, QueryState
from service.workspace.paging import (
    FetchedPage,
    ListState,
    PageState,
    cursor_binding,
    decode_cursor,
    decode_page_token,
    encode_cursor,
    encode_page_token,
    resume_state,
    short_id,
)
from service.workspace.plan import NativeQuery, Slot
from service.workspace.providers import REGISTRY

SIGNER = TokenSigner(b"s" * 32)
BINDING = "b" * 32


def test_short_ids_are_eight_url_safe_characters() -> None:
    ids = {short_id(f"key{i}") for i in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 8 and "=" not in i for i in ids)


@given(
    st.lists(
        st.tuples(st.none() | st.text(max_size=20), st.integers(0, 50), st.integers(0, 10**6),
                  st.integers(1, 100), st.booleans(), st.integers(0, 10**6)),
        max_size=8,
    ),
    st.sets(st.integers(0, 10**6), max_size=50),
    st.integers(1, 1000),
)
def test_page_tokens_round_trip(
    lists: list[tuple[str | None, int, int, int, bool, int]], emitted: set[int], page: int
) -> None:
    state = PageState(
        tuple(ListState(*item) for item in lists), frozenset(short_id(str(e)) for e in emitted),
        page,
    )
    token = encode_page_token(SIGNER, BINDING, state)
    assert decode_page_token(SIGNER, BINDING, token, len(lists)) == state


def test_page_token_checks() -> None:
    state = PageState((ListState(),), frozenset(), 2)
    token = encode_page_token(SIGNER, BINDING, state)
    with pytest.raises(InvalidPageToken):
        decode_page_token(SIGNER, BINDING, token, 2)  # another number of lists
    with pytest.raises(InvalidPageToken):
        decode_page_token(SIGNER, "c" * 32, token, 1)
    with pytest.raises(InvalidPageToken):
        decode_page_token(TokenSigner(b"x" * 32), BINDING, token, 1)
    bad = SIGNER.sign("ws-page", BINDING, {"l": [[None, -1, 0, 10, 0, 0]], "e": "", "p": 1})
    with pytest.raises(InvalidPageToken):
        decode_page_token(SIGNER, BINDING, bad, 1)
    odd = SIGNER.sign("ws-page", BINDING, {"l": [ListState().to_wire()], "e": "abc", "p": 1})
    with pytest.raises(InvalidPageToken):
        decode_page_token(SIGNER, BINDING, odd, 1)


def test_cursors_round_trip_and_are_empty_when_exhausted() -> None:
    state = ListState("p3", 2, 40, 20, False, 7, frozenset({short_id("a"), short_id("b")}))
    cursor = encode_cursor(SIGNER, BINDING, state)
    assert decode_cursor(SIGNER, BINDING, cursor, "queries[0].cursor") == state
    assert encode_cursor(SIGNER, BINDING, ListState(exhausted=True)) == ""
    with pytest.raises(InvalidPageToken) as caught:
        decode_cursor(SIGNER, BINDING, "x" * 4001, "queries[2].cursor")
    assert caught.value.violations[0].field == "queries[2].cursor"


def test_cursor_binding_covers_every_bound_part() -> None:
    base = ("t", ProviderId.SLACK, "a1", "text", None, TimeRange(), "")
    variants = [
        ("t2", *base[1:]),
        (base[0], ProviderId.GMAIL, *base[2:]),
        (*base[:2], "a2", *base[3:]),
        (*base[:3], "other", *base[4:]),
        (*base[:5], TimeRange(datetime(2025, 1, 1, tzinfo=UTC)), ""),
        (*base[:6], "project"),
    ]
    bindings = {cursor_binding(*v) for v in variants}
    assert len(bindings | {cursor_binding(*base)}) == len(variants) + 1


def _page(cursor: str | None, offset: int, ids: str, following: str | None) -> FetchedPage:
    return FetchedPage(cursor, offset, tuple(ids), following)


def test_resume_at_the_first_result_not_emitted() -> None:
    start = ListState(limit=3)
    pages = [_page(None, 0, "abc", "p2"), _page("p2", 3, "def", "p3")]
    state = resume_state(start, pages, {"a", "b", "c", "d", "f"}, 5)
    assert state == ListState("p2", 1, 3, 3, False, 5, frozenset({"f"}))


def test_resume_after_everything_fetched_was_emitted() -> None:
    start = ListState(limit=3)
    pages = [_page(None, 0, "abc", "p2")]
    assert resume_state(start, pages, set("abc"), 3) == ListState("p2", 0, 3, 3, False, 3)
    pages = [_page(None, 0, "abc", None)]
    assert resume_state(start, pages, set("abc"), 3).exhausted


def test_resume_keeps_the_start_skip_and_seen() -> None:
    start = ListState("p2", 2, 3, 3, False, 2, frozenset({"f"}))
    pages = [_page("p2", 3, "def", "p3")]
    # d, e skipped by count; f seen before; nothing emitted in this call.
    assert resume_state(start, pages, set(), 2) == ListState("p3", 0, 6, 3, False, 2)
    assert resume_state(start, [], set(), 4) == ListState("p2", 2, 3, 3, False, 4,
                                                          frozenset({"f"}))


def _doc(doc_id: str, when: datetime | None = None, dedupe_key: str = "") -> NativeDocument:
    return NativeDocument(doc_id, f"title {doc_id}", f"https://x/{doc_id}", modified_at=when,
                          dedupe_key=dedupe_key)


def _run(start: ListState, time_range: TimeRange | None = None) -> ListRun:
    account = Account("a1", "t", ProviderId.SLACK, "A", "https://slack.example")
    query = NativeQuery(ProviderId.SLACK, "x", time_range=time_range or TimeRange())
    return ListRun(Slot(0, 0, query, account, None), start, REGISTRY[ProviderId.SLACK])


def test_list_run_ranks_absolutely_and_votes_once_per_result() -> None:
    run = _run(ListState(None, 1, 10, 3))
    votes = run.accept(ProviderPage((_doc("a"), _doc("b"), _doc("b"), _doc("c")), "n2"))
    assert [(v.doc.id, v.rank) for v in votes] == [("b", 12), ("c", 14)]  # a was emitted before
    assert run.fetched == 14
    assert run.provider_query().cursor == "n2"
    assert run.state is QueryState.OK


def test_list_run_rechecks_the_time_range() -> None:
    day = TimeRange(datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 1, 2, tzinfo=UTC))
    run = _run(ListState(), day)
    docs = (
        _doc("in", datetime(2025, 1, 1, tzinfo=UTC)),
        _doc("end", datetime(2025, 1, 2, tzinfo=UTC)),
        _doc("undated"),
    )
    votes = run.accept(ProviderPage(docs))
    assert [v.doc.id for v in votes] == ["in"]
    assert run.exhausted
    assert run.partial
    assert "without a date" in run.message


def test_list_run_stops_on_a_repeated_cursor_and_reports_skipped_legs() -> None:
    run = _run(ListState("same"))
    run.accept(ProviderPage((_doc("a"),), "same", skipped_legs={"code": "the query uses OR"}))
    assert run.exhausted
    assert run.message == "skipped code: the query uses OR."


def test_fusion_key_uses_dedupe_key_across_accounts_only() -> None:
    shared = _doc("e1", dedupe_key="ical:1")
    assert fusion_key(ProviderId.GOOGLE_CALENDAR, "a1", shared) == fusion_key(
        ProviderId.GOOGLE_CALENDAR, "a2", shared
    )
    plain = _doc("i1")
    assert fusion_key(ProviderId.GITHUB, "a1", plain) != fusion_key(ProviderId.GITHUB, "a2", plain)


def test_preview_centres_on_a_query_word() -> None:
    content = "x" * 3000 + " needle " + "y" * 3000
    snippet = preview(content, "the needle")
    assert len(snippet) == 1800
    assert "needle" in snippet
    assert preview("short", "q") == "short"
