"""service.deadlines.within: asyncio.timeout's semantics with one shared loop timer."""

from __future__ import annotations

import asyncio
import random

import pytest

from service import deadlines
from service.deadlines import within


def _timers(loop: asyncio.AbstractEventLoop) -> int:
    """Live (not cancelled) timer handles in the loop's heap."""
    scheduled = loop._scheduled  # type: ignore[attr-defined]
    return sum(1 for handle in scheduled if not handle.cancelled())


async def _waiting_within(seconds: float) -> asyncio.Task[None]:
    """A task blocked inside `within(seconds)` (it would sleep a minute)."""
    entered = asyncio.Event()

    async def body() -> None:
        async with within(seconds):
            entered.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(body())
    await entered.wait()
    return task


async def test_a_block_past_its_deadline_raises_timeout_error() -> None:
    started = asyncio.get_running_loop().time()
    with pytest.raises(TimeoutError):
        async with within(0.05):
            await asyncio.sleep(5)
    assert 0.04 <= asyncio.get_running_loop().time() - started < 1


async def test_a_block_within_its_deadline_returns_and_leaves_the_task_uncancelled() -> None:
    async with within(1):
        await asyncio.sleep(0)
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0.01)  # no late cancellation arrives


async def test_a_deadline_already_past_cancels_at_the_next_await() -> None:
    with pytest.raises(TimeoutError):
        async with within(-1):
            await asyncio.sleep(1)


async def test_a_cancellation_from_outside_propagates_as_cancellation() -> None:
    task = await _waiting_within(10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_inner_of_nested_scopes_expires_alone() -> None:
    async with within(5):
        with pytest.raises(TimeoutError):
            async with within(0.02):
                await asyncio.sleep(5)
        await asyncio.sleep(0.01)  # the outer scope still runs


async def test_the_outer_of_nested_scopes_expiring_first_is_the_outers_timeout() -> None:
    inner_claimed = False

    async def nested() -> None:
        nonlocal inner_claimed
        async with within(0.02):
            try:
                async with within(5):
                    await asyncio.sleep(5)
            except TimeoutError:
                inner_claimed = True
                raise

    with pytest.raises(TimeoutError):
        await nested()
    assert not inner_claimed


async def test_many_concurrent_scopes_expire_each_at_its_own_deadline() -> None:
    """Random deadlines, some blocks finishing first: each block's outcome is its own."""
    rng = random.Random(7)
    loop = asyncio.get_running_loop()
    plans = [(rng.uniform(0.0, 0.3), rng.uniform(0.0, 0.3)) for _ in range(200)]

    async def one(limit: float, work: float) -> tuple[bool, float]:
        started = loop.time()
        try:
            async with within(limit):
                await asyncio.sleep(work)
        except TimeoutError:
            return True, loop.time() - started
        return False, loop.time() - started

    outcomes = await asyncio.gather(*(one(limit, work) for limit, work in plans))
    for (limit, work), (timed_out, took) in zip(plans, outcomes, strict=True):
        if abs(limit - work) < 0.06:
            continue  # too close to call on a busy machine (the loop can be 20+ ms late)
        assert timed_out == (limit < work), (limit, work)
        assert took >= min(limit, work) - 0.005


async def test_scopes_share_one_timer_and_closed_ones_do_not_pile_up() -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0.01)
    before = _timers(loop)
    for _ in range(3000):
        async with within(30):
            pass
    async with within(30):
        assert _timers(loop) <= before + 1
    shared = deadlines._by_loop[loop]
    assert len(shared._heap) <= 2 * shared._open + 257


def test_closed_scopes_do_not_pile_up_when_each_deadline_is_earlier() -> None:
    """Every scope re-arms the timer (its deadline is the earliest yet): still bounded."""
    loop = asyncio.new_event_loop()
    try:

        async def scopes() -> None:
            for i in range(3000):
                async with within(5 - i * 0.001):
                    pass

        loop.run_until_complete(scopes())
        shared = deadlines._by_loop[loop]
        assert len(shared._heap) <= 2 * shared._open + 257
    finally:
        loop.close()


async def test_an_expiry_together_with_an_outside_cancellation_propagates_cancellation() -> None:
    """As asyncio.timeout: when the task is also cancelled from outside, the caller's
    cancellation wins over the scope's timeout."""
    loop = asyncio.get_running_loop()
    task = await _waiting_within(0.05)
    shared = deadlines._by_loop[loop]
    when = max(item[0] for item in shared._heap if item[2].task is task)
    loop.call_at(when, task.cancel)  # due in the same loop iteration as the expiry
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_timer_the_loop_runs_early_still_expires_the_scope_it_was_armed_for() -> None:
    """asyncio runs a timer up to its clock resolution before the time it was armed for;
    the scope due then must expire, not wait for another timer at the same instant."""
    loop = asyncio.new_event_loop()
    try:

        async def scenario() -> None:
            task = await _waiting_within(5)
            shared = deadlines._by_loop[loop]
            assert shared._timer is not None
            shared._timer.cancel()
            fired = loop.time()
            shared._fire()  # as the loop does for a timer it finds due (5 s "early" here)
            with pytest.raises(TimeoutError):
                await task
            assert loop.time() - fired < 1  # at once, not at the deadline's real time
            assert shared._open == 0

        loop.run_until_complete(scenario())
    finally:
        loop.close()
