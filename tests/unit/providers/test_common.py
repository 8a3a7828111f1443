"""Shared adapter helpers: cursors, interleaving, settling fan-outs, times."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from service.workspace.model import NativeDocument, ProviderError, QueryState
from service.workspace.providers._common import (
    LegResult,
    decode_cursor_map,
    encode_cursor,
    from_epoch,
    has_boolean_operators,
    interleave,
    join_messages,
    make_page_cursor,
    parse_page_cursor,
    parse_time,
    resumable_leg,
    settle,
)


def test_interleave_by_rank() -> None:
    assert interleave([[1, 2, 3], [10], [20, 21]]) == [1, 10, 20, 2, 21, 3]
    assert interleave([]) == []


def test_page_cursor_round_trip() -> None:
    assert parse_page_cursor(None, 3) == (1, [0, 1, 2])
    assert make_page_cursor(2, [0, 1, 2], 3) == "2"
    assert parse_page_cursor("2", 3) == (2, [0, 1, 2])
    partial = make_page_cursor(4, [2], 3)
    assert partial is not None
    assert parse_page_cursor(partial, 3) == (4, [2])
    assert make_page_cursor(2, [], 3) is None


@pytest.mark.parametrize(
    "bad", ["x", "{}", '{"p": 2, "l": [7]}', '{"p": 0, "l": [0]}', "[1]", "99999"]
)
def test_bad_page_cursor_fails(bad: str) -> None:
    with pytest.raises(ProviderError) as caught:
        parse_page_cursor(bad, 3)
    assert caught.value.state is QueryState.FAILED


def test_map_cursor() -> None:
    assert decode_cursor_map(encode_cursor({"a": "1"})) == {"a": "1"}
    with pytest.raises(ProviderError):
        decode_cursor_map('{"a": 1}')


def test_settle_keeps_partial_success_and_raises_when_all_fail() -> None:
    doc = NativeDocument("1", "t", "u")
    error = ProviderError(QueryState.RATE_LIMITED, "slow down", retry_after=3)
    settled = settle([("a", LegResult((doc,))), ("b", error)])
    legs, messages = settled.legs, settled.messages
    assert list(legs) == ["a"]
    assert messages == ["b failed: slow down"]
    with pytest.raises(ProviderError) as caught:
        settle([("b", error)])
    assert caught.value is error


def test_messages_join_and_dedupe() -> None:
    assert join_messages(["a", "", "b.", "a"]) == "a. b."


def test_boolean_detection() -> None:
    assert has_boolean_operators("a OR b")
    assert not has_boolean_operators("a or b")
    assert not has_boolean_operators('"a OR b"')
    assert not has_boolean_operators("label:OR")


def test_parse_time_is_utc() -> None:
    assert parse_time("2024-01-05T10:00:00.000+0100") == datetime(2024, 1, 5, 9, tzinfo=UTC)
    assert parse_time("2024-01-05T10:00:00") == datetime(2024, 1, 5, 10, tzinfo=UTC)
    assert parse_time("garbage") is None
    assert parse_time(None) is None


def test_epoch_times_are_exact_to_the_microsecond_in_every_year() -> None:
    rng = random.Random(7)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for _ in range(2_000):  # Gmail's milliseconds and Slack's "seconds.micros", years 1-9999
        millis = rng.randrange(-62_135_596_800_000, 253_402_300_800_000)
        assert from_epoch(str(millis), millis=True) == epoch + timedelta(milliseconds=millis)
        micros = rng.randrange(-62_135_596_800_000_000, 253_402_300_800_000_000)
        seconds, rest = divmod(abs(micros), 1_000_000)
        sign = "-" if micros < 0 else ""
        assert from_epoch(f"{sign}{seconds}.{rest:06d}") == epoch + timedelta(microseconds=micros)
    assert from_epoch("253402300799999", millis=True) == datetime(
        9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    assert from_epoch(1700000000) == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    # Digits past the microsecond round half to even.
    assert from_epoch("0.0000015") == epoch + timedelta(microseconds=2)
    assert from_epoch("0.0000025") == epoch + timedelta(microseconds=2)
    assert from_epoch("-0.5") == epoch - timedelta(microseconds=500_000)
    assert from_epoch("1700000000123.5", millis=True) == datetime(
        2023, 11, 14, 22, 13, 20, 123_500, tzinfo=UTC)
    assert from_epoch("1.7e9") == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)


@pytest.mark.parametrize("value", [
    "-62135596800001", "253402300800000", "9" * 5_000, "1e999999999", "-1e999999999", "nan",
    "inf", "-Infinity", "0x10", "", "  ", "1.2.3", None, True, [], {}, float("nan"), 10**400,
])
def test_epoch_times_outside_the_calendar_or_not_numbers_are_none(value: object) -> None:
    assert from_epoch(value, millis=True) is None


async def test_a_leg_reads_its_first_page_again_only_for_a_refused_resumed_token() -> None:
    asked: list[str | None] = []

    def reading(refuse: ProviderError) -> Callable[[str | None], Awaitable[LegResult]]:
        async def read(token: str | None) -> LegResult:
            asked.append(token)
            if token is not None:
                raise refuse
            return LegResult((), next_token="fresh")
        return read

    expired = ProviderError(QueryState.FAILED, "Invalid Value (HTTP 400)")
    leg = await resumable_leg(reading(expired), "old", resumed=True)
    assert (leg.restarted, leg.next_token, asked) == (True, "fresh", ["old", None])
    down = ProviderError(QueryState.FAILED, "HTTP 503", retryable=True)
    for refuse, resumed in ((expired, False), (down, True)):  # fresh tokens, retryable errors
        asked.clear()
        with pytest.raises(ProviderError):
            await resumable_leg(reading(refuse), "old", resumed=resumed)
        assert asked == ["old"]
