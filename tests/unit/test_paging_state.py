"""Resume state of workspace paging: tokens, cursors, resume points and list runs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.errors import InvalidPageToken, ResourceExhausted
from service.ranking.tokens import MAX_TOKEN_CHARS, TokenSigner
from service.timerange import TimeRange
from service.workspace.lists import MAX_RESTARTS, ListRun
from service.workspace.model import (
    Account,
    NativeDocument,
    ProviderError,
    ProviderId,
    ProviderPage,
    QueryState,
)
from service.workspace.paging import (
    MAX_CURSOR_SEEN,
    MAX_PAGE_TOKEN_CHARS,
    FetchedPage,
    ListState,
    PageState,
    Pass,
    ReadPass,
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
from service.workspace.results import canonical_url, fusion_key, preview, result_id

SIGNER = TokenSigner(b"s" * 32)
BINDING = "b" * 32


def test_short_ids_are_eight_url_safe_characters() -> None:
    ids = {short_id(f"key{i}") for i in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 8 and "=" not in i for i in ids)


@given(
    st.lists(
        st.tuples(st.none() | st.text(max_size=20), st.integers(0, 10**6), st.integers(1, 100),
                  st.booleans(), st.integers(0, 10**6), st.sampled_from(list(Pass)),
                  st.integers(0, 2**40)),
        max_size=8,
    ),
    st.lists(st.integers(0, 10**6), max_size=50, unique=True),
    st.integers(1, 1000),
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 2**40), st.integers(0, 50),
                       st.integers(0, 9)), min_size=8, max_size=8),
)
def test_page_tokens_round_trip(
    lists: list[tuple[str | None, int, int, bool, int, Pass, int]], emitted: list[int], page: int,
    streaks: list[tuple[int, int, int, int]],
) -> None:
    keys = _keys(len(lists))
    states = tuple(
        ListState(*item, failures=failures, failing_since=since if failures else 0,
                  behind=behind, restarts=restarts)
        for item, (failures, since, behind, restarts) in zip(lists, streaks, strict=False)
    )
    state = PageState(states, tuple(short_id(str(e)) for e in emitted), page, keys)
    token = encode_page_token(SIGNER, BINDING, state)
    assert decode_page_token(SIGNER, BINDING, token, keys) == state


def _keys(count: int) -> tuple[tuple[int, str], ...]:
    return tuple((i % 4, f"acc_{i // 4}") for i in range(count))


def test_page_token_checks() -> None:
    keys = _keys(1)
    state = PageState((ListState(),), (), 2, keys)
    token = encode_page_token(SIGNER, BINDING, state)
    with pytest.raises(InvalidPageToken):
        decode_page_token(SIGNER, "c" * 32, token, keys)
    with pytest.raises(InvalidPageToken):
        decode_page_token(TokenSigner(b"x" * 32), BINDING, token, keys)
    for wire in ([None, -1, 10, 0, 0, 0, 0], [None, 0, 10, 0, 0, 3, 0], [None, 0, 10, 0, 0],
                 [None, 0, 10, 0, 0, 0, 0, 1], [None, 0, 10, 0, 0, 0, 0, 1, 5, -1],
                 [None, 0, 10, 0, 0, 0, 0] + [0] * 10):
        bad = SIGNER.sign("ws-page", BINDING, {"l": [wire], "k": [[0, "a"]], "e": "", "p": 1})
        with pytest.raises(InvalidPageToken):
            decode_page_token(SIGNER, BINDING, bad, keys)
    one = [ListState().to_wire()]
    for names in ([[0, "a"], [1, "a"]], [[-1, "a"]], [[True, "a"]], [[0, 1]], [[0]], "0:a"):
        bad = SIGNER.sign("ws-page", BINDING, {"l": one, "k": names, "e": "", "p": 1})
        with pytest.raises(InvalidPageToken):
            decode_page_token(SIGNER, BINDING, bad, keys)
    twice = SIGNER.sign("ws-page", BINDING, {"l": one * 2, "k": [[0, "a"], [0, "a"]], "e": "",
                                             "p": 1})
    with pytest.raises(InvalidPageToken):
        decode_page_token(SIGNER, BINDING, twice, keys)
    odd = SIGNER.sign("ws-page", BINDING, {"l": one, "k": [[0, "a"]], "e": "abc", "p": 1})
    with pytest.raises(InvalidPageToken):
        decode_page_token(SIGNER, BINDING, odd, keys)


def test_a_list_state_from_a_later_version_reads_the_fields_known_here() -> None:
    """Fields a later version appends are ignored, so its tokens resume here during a rolling
    upgrade (an older replica refused every token with a field it did not know)."""
    keys = _keys(1)
    later = [None, 30, 10, 0, 3, 0, 0, 2, 1_700_000_000, 1, 2, 1, 7, 0, "a later field", [1, 2]]
    token = SIGNER.sign("ws-page", BINDING, {"l": [later], "k": [[0, "acc_0"]], "e": "", "p": 4,
                                             "z": "a later key"})
    state = decode_page_token(SIGNER, BINDING, token, keys)
    assert state.lists == (ListState(None, 30, 10, False, 3, failures=2,
                                     failing_since=1_700_000_000, behind=1, restarts=2,
                                     parked=True, idle=7),)
    assert state.page_number == 4


def test_a_parked_list_travels_and_older_tokens_are_not_parked() -> None:
    parked = ListState("c", 20, 10, emitted=4, parked=True)
    assert parked.to_wire()[7:] == [0, 0, 0, 0, 1]
    assert ListState.from_wire(parked.to_wire(), "page_token") == parked
    assert not ListState.from_wire(ListState("c", 20, 10).to_wire(), "page_token").parked
    with pytest.raises(InvalidPageToken):
        ListState.from_wire([*parked.to_wire()[:11], 2], "page_token")
    ended = ListState(None, 30, 10, True, 4, failed=True)
    assert ended.to_wire()[7:] == [0, 0, 0, 0, 0, 0, 1]
    assert ListState.from_wire(ended.to_wire(), "page_token") == ended
    idle = ListState("c", 20, 10, idle=12)
    assert ListState.from_wire(idle.to_wire(), "page_token") == idle


def test_lists_resume_by_name_whatever_accounts_came_or_went() -> None:
    """A token names its lists: lists of accounts connected since have no resume point (they
    start from their first page), lists of accounts disconnected since are dropped, and every
    other list resumes where it was, wherever it now sits."""
    lists = (ListState("a", 10, 10), ListState("b", 20, 10), ListState("c", 30, 10))
    keys = ((0, "acc_a"), (0, "acc_b"), (1, "acc_a"))
    token = encode_page_token(SIGNER, BINDING, PageState(lists, (), 2, keys))
    now = ((0, "acc_new"), (1, "acc_a"), (0, "acc_a"))  # acc_b gone, acc_new connected
    state = decode_page_token(SIGNER, BINDING, token, now)
    assert state.resume_of((0, "acc_a")) == lists[0]
    assert state.resume_of((1, "acc_a")) == lists[2]
    assert state.resume_of((0, "acc_new")) is None
    assert state.keys == keys  # what the token named, so the server can say what ended


def test_a_token_issued_before_lists_had_names_resumes_them_in_order() -> None:
    """Tokens in flight across the upgrade: bound to the lists (the legacy binding), without
    names; the request's lists now name them in order."""
    lists = (ListState("a", 10, 10), ListState("b", 20, 10))
    legacy = "l" * 32
    old = SIGNER.sign("ws-page", legacy, {"l": [x.to_wire() for x in lists], "e": "", "p": 3})
    keys = ((0, "acc_a"), (0, "acc_b"))
    state = decode_page_token(SIGNER, BINDING, old, keys, legacy=lambda: legacy)
    assert state == PageState(lists, (), 3, keys)
    with pytest.raises(InvalidPageToken):
        decode_page_token(SIGNER, BINDING, old, keys)  # no legacy binding offered
    with pytest.raises(InvalidPageToken):
        decode_page_token(SIGNER, BINDING, old, keys[:1], legacy=lambda: legacy)  # lists changed


def test_a_token_keeps_the_newest_ids_that_fit_and_forgets_the_oldest() -> None:
    emitted = tuple(short_id(str(i)) for i in range(4000))  # 32,000 characters of ids
    keys = _keys(1)
    token = encode_page_token(SIGNER, BINDING, PageState((ListState(),), emitted, 9, keys))
    bare = encode_page_token(SIGNER, BINDING, PageState((ListState(),), (), 9, keys))
    assert 0 < len(token) <= len(bare) + MAX_TOKEN_CHARS
    kept = decode_page_token(SIGNER, BINDING, token, keys).emitted
    assert 1400 < len(kept) < len(emitted)
    assert kept == emitted[-len(kept):]  # the most recent ones, in order


def test_every_list_travels_however_many_and_ids_fit_beside_them() -> None:
    """160 lists with 160-character provider page tokens need ~40 KiB: more than a 16 KiB
    token, which then came out empty (a page that said nothing was left)."""
    lists = tuple(ListState(f"{i:04d}" + "t" * 156, 10, 10) for i in range(160))
    emitted = tuple(short_id(str(i)) for i in range(4000))
    keys = _keys(160)
    token = encode_page_token(SIGNER, BINDING, PageState(lists, emitted, 2, keys))
    bare = encode_page_token(SIGNER, BINDING, PageState(lists, (), 2, keys))
    assert len(bare) > MAX_TOKEN_CHARS
    assert len(token) <= len(bare) + MAX_TOKEN_CHARS
    state = decode_page_token(SIGNER, BINDING, token, keys)
    assert state.lists == lists
    assert 1400 < len(state.emitted) < len(emitted)
    assert state.emitted == emitted[-len(state.emitted):]


def test_lists_too_large_for_any_token_are_refused_not_dropped() -> None:
    lists = tuple(ListState(f"{i:05d}" + "t" * 400, 10, 10) for i in range(2500))
    with pytest.raises(ResourceExhausted) as caught:
        encode_page_token(SIGNER, BINDING, PageState(lists, (), 2, _keys(2500)))
    assert caught.value.reason == "PAGE_TOKEN_TOO_LARGE"
    assert caught.value.metadata["lists"] == "2500"
    assert int(caught.value.metadata["limit"]) == MAX_PAGE_TOKEN_CHARS


def test_cursors_round_trip_and_are_empty_when_exhausted() -> None:
    state = ListState("p3", 40, 20, False, 7, Pass.SWEEP, 0, (short_id("a"), short_id("b")))
    cursor = encode_cursor(SIGNER, BINDING, state, "acc_1")
    assert decode_cursor(SIGNER, BINDING, cursor, "queries[0].cursor") == state
    assert encode_cursor(SIGNER, BINDING, ListState(exhausted=True), "acc_1") == ""
    with pytest.raises(InvalidPageToken) as caught:
        decode_cursor(SIGNER, BINDING, "x" * 4001, "queries[2].cursor")
    assert caught.value.violations[0].field == "queries[2].cursor"


def test_a_cursor_keeps_its_newest_ids() -> None:
    seen = tuple(short_id(str(i)) for i in range(MAX_CURSOR_SEEN + 50))
    cursor = encode_cursor(SIGNER, BINDING, ListState("p9", 60, 20, seen=seen), "acc_1")
    assert decode_cursor(SIGNER, BINDING, cursor, "c").seen == seen[-MAX_CURSOR_SEEN:]


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


def _page(
    cursor: str | None, offset: int, ids: str, following: str | None, complete: bool = True
) -> FetchedPage:
    return FetchedPage(cursor, offset, tuple(ids), following, complete)


def _read(start: ListState, *pages: FetchedPage, **options: object) -> ReadPass:
    sweep = options.pop("sweep", start.sweep)
    assert isinstance(sweep, Pass)
    return ReadPass(start, pages, sweep, **options)  # type: ignore[arg-type]


def test_resume_rereads_the_page_of_the_first_result_not_emitted() -> None:
    start = ListState(limit=3)
    read = _read(start, _page(None, 0, "abc", "p2"), _page("p2", 3, "def", "p3"))
    # Identity, not position: whatever moves on page p2, e stays a candidate there.
    assert resume_state(read, set("abcdf"), 5) == ListState("p2", 3, 3, False, 5)


def test_resume_rereads_a_page_that_failed_in_part() -> None:
    start = ListState(limit=3)
    read = _read(start, _page(None, 0, "abc", "p2", complete=False), _page("p2", 3, "def", None))
    assert resume_state(read, set("abcdef"), 6) == ListState(None, 0, 3, False, 6)


def test_a_list_whose_first_page_is_its_end_is_exhausted() -> None:
    read = _read(ListState(limit=3), _page(None, 0, "abc", None))
    assert resume_state(read, set("abc"), 3) == ListState(None, 3, 3, True, 3)
    read = _read(ListState(limit=3), _page(None, 0, "abc", "p2"))
    assert resume_state(read, set("abc"), 3) == ListState("p2", 3, 3, False, 3)


def test_an_end_reached_from_a_later_page_asks_for_a_sweep() -> None:
    start = ListState("p2", 3, 3, emitted=3)
    read = _read(start, _page("p2", 3, "de", None))
    assert resume_state(read, set("abcde"), 5) == ListState(None, 0, 3, False, 5, Pass.SWEEP)


def test_an_end_reached_on_a_second_page_of_the_same_call_asks_for_a_sweep() -> None:
    """Between two pages, even of one call, an item can be deleted and a result move onto
    the page already read: only a list that is one provider answer is taken whole."""
    read = _read(ListState(limit=3), _page(None, 0, "abc", "p2"), _page("p2", 3, "de", None))
    assert resume_state(read, set("abcde"), 5) == ListState(None, 0, 3, False, 5, Pass.SWEEP)


def test_a_sweep_ends_the_list_only_when_it_reaches_the_end_with_everything_emitted() -> None:
    sweep = ListState(limit=3, sweep=Pass.SWEEP)
    whole = _read(sweep, _page(None, 0, "abc", "p2"), _page("p2", 3, "de", None))
    assert resume_state(whole, set("abcde"), 5).exhausted
    late = resume_state(whole, set("abce"), 4)  # d moved ahead and was found by the sweep
    assert late == ListState(None, 0, 3, False, 4, Pass.SWEEP)
    short = _read(sweep, _page(None, 0, "abc", "p2"))  # not read to its end: sweep again
    assert resume_state(short, set("abc"), 3) == ListState(None, 0, 3, False, 3, Pass.SWEEP)


def test_a_sweep_cut_by_the_budget_goes_on_where_it_stopped_and_its_end_is_final() -> None:
    sweep = ListState(limit=3, sweep=Pass.SWEEP)
    cut = _read(sweep, _page(None, 0, "abc", "p2"), cut=True)
    state = resume_state(cut, set("abc"), 3)
    assert state == ListState("p2", 3, 3, False, 3, Pass.LONG_SWEEP)
    end = _read(state, _page("p2", 3, "de", None))
    assert resume_state(end, set("abcde"), 5).exhausted


def test_a_final_failure_ends_the_list_and_an_unread_list_keeps_its_place() -> None:
    start = ListState("p2", 3, 3, emitted=2)
    assert resume_state(_read(start, ended=True), set(), 2).exhausted
    assert resume_state(_read(start), set(), 4) == ListState("p2", 3, 3, False, 4)


def _doc(doc_id: str, when: datetime | None = None, dedupe_key: str = "") -> NativeDocument:
    return NativeDocument(doc_id, f"title {doc_id}", f"https://x/{doc_id}", modified_at=when,
                          dedupe_key=dedupe_key)


def _run(start: ListState, time_range: TimeRange | None = None) -> ListRun:
    account = Account("a1", "t", ProviderId.SLACK, "A", "https://slack.example")
    query = NativeQuery(ProviderId.SLACK, "x", time_range=time_range or TimeRange())
    return ListRun(Slot(0, 0, query, account, None), start, REGISTRY[ProviderId.SLACK], now=0.0)


def test_list_run_ranks_absolutely_and_votes_once_per_result() -> None:
    account = "a1"
    seen = (short_id(result_id(fusion_key(ProviderId.SLACK, account, _doc("a")))),)
    run = _run(ListState(None, 10, 3, seen=seen))
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


def test_list_run_stops_on_a_repeated_cursor_and_reports_skipped_legs_once() -> None:
    run = _run(ListState())
    run.accept(ProviderPage((_doc("a"),), None, skipped_legs={"code": "the query uses OR"}))
    assert run.exhausted
    assert run.message == "skipped code: the query uses OR."
    again = _run(ListState())
    again.accept(ProviderPage((), None, message="the query uses OR",
                              skipped_legs={"code": "the query uses OR"}))
    assert again.message == "the query uses OR."  # said once, not twice


def test_list_run_reaching_the_end_from_a_later_page_sweeps_at_once() -> None:
    run = _run(ListState("p2", 20, 20))
    run.accept(ProviderPage((_doc("x"),), None))
    assert run.sweeping
    assert run.fetchable
    assert run.provider_query().cursor is None
    assert run.fetched == 0


def test_a_rate_limited_list_waits_out_the_provider_back_off() -> None:
    run = _run(ListState("p2", 20, 20))
    run.fail(ProviderError(QueryState.RATE_LIMITED, "slow down", retry_after=30), now=1000.0)
    state = run.resume(set())
    assert state.wait_until == 1030
    assert state.cursor == "p2"
    assert not state.exhausted
    account = Account("a1", "t", ProviderId.SLACK, "A", "https://slack.example")
    query = NativeQuery(ProviderId.SLACK, "x")
    later = ListRun(Slot(0, 0, query, account, None), state, REGISTRY[ProviderId.SLACK],
                    now=1010.0)
    assert not later.fetchable
    assert later.state is QueryState.RATE_LIMITED
    assert later.retry_after == 20
    assert later.resume(set()).wait_until == 1030


def test_fusion_key_is_one_per_item_across_accounts() -> None:
    shared = _doc("e1", dedupe_key="ical:1")
    assert fusion_key(ProviderId.GOOGLE_CALENDAR, "a1", shared) == fusion_key(
        ProviderId.GOOGLE_CALENDAR, "a2", shared
    )
    issue = _doc("i1")
    spelled = NativeDocument("i1", "t", "HTTPS://X:443/i1/")
    same = fusion_key(ProviderId.GITHUB, "a2", spelled)
    assert fusion_key(ProviderId.GITHUB, "a1", issue) == same
    assert fusion_key(ProviderId.GITHUB, "a1", issue) != fusion_key(ProviderId.GITLAB, "a1", issue)
    bare = NativeDocument("m1", "t", "")
    assert fusion_key(ProviderId.GMAIL, "a1", bare) != fusion_key(ProviderId.GMAIL, "a2", bare)
    assert canonical_url("https://x/a#frag") == "https://x/a#frag"


def test_preview_centres_on_a_query_word() -> None:
    content = "x" * 3000 + " needle " + "y" * 3000
    snippet = preview(content, "the needle")
    assert len(snippet) == 1800
    assert "needle" in snippet
    assert preview("short", "q") == "short"


def test_a_refused_resume_token_reads_the_list_again_from_its_first_page() -> None:
    refused = ProviderError(QueryState.FAILED, "Invalid pageToken")
    run = _run(ListState("p3", 40, 20, emitted=7, sweep=Pass.LONG_SWEEP))
    assert run.restart(refused)
    assert run.provider_query().cursor is None
    assert (run.fetched, run.sweep) == (0, Pass.SWEEP)
    assert "expired" in run.message
    assert run.resume(set()).restarts == 1  # no result of the list emitted since
    assert not _run(ListState(None, 0, 20)).restart(refused)  # nothing was resumed
    fresh = _run(ListState("p3", 40, 20))
    fresh.accept(ProviderPage((_doc("a"),), "p4"))
    assert not fresh.restart(refused)  # a token of this call: not expiry
    assert not _run(ListState("p3", 40, 20)).restart(
        ProviderError(QueryState.FAILED, "5xx", retryable=True))  # read again anyway
    assert not _run(ListState("p3", 40, 20)).restart(
        ProviderError(QueryState.NEEDS_RECONNECT, "401"))


def test_restarts_in_a_row_without_a_result_emitted_are_bounded() -> None:
    refused = ProviderError(QueryState.FAILED, "Invalid pageToken")
    assert not _run(ListState("p3", 40, 20, restarts=MAX_RESTARTS)).restart(refused)
    run = _run(ListState("p3", 40, 20, emitted=2, restarts=MAX_RESTARTS - 1))
    assert run.restart(refused)
    run.contributed += 1  # a result of the list was emitted: the restart was worth it
    assert run.resume(set()).restarts == 0
