"""A tenant's message permits: held while a message is produced and sent, refused after the
write timeout, and never lost to a waiter that timed out or was cancelled."""

from __future__ import annotations

import asyncio

import pytest

from service.api.stream_budget import ResponseLimits, StreamBudget
from service.errors import ResourceExhausted

TIMEOUT = 0.2


def _budget(permits: int = 1, timeout: float = TIMEOUT) -> StreamBudget:
    return StreamBudget(ResponseLimits(write_timeout=timeout, messages_per_tenant=permits))


async def test_a_tenant_whose_permits_are_held_is_refused_after_the_write_timeout() -> None:
    budget = _budget()
    loop = asyncio.get_running_loop()
    async with budget.message("alice"):
        started = loop.time()
        with pytest.raises(ResourceExhausted) as refused:
            async with budget.message("alice"):
                pytest.fail("a second permit was granted")
        waited = loop.time() - started
        async with budget.message("bob"):  # another tenant's permits are its own
            pass
    assert TIMEOUT * 0.9 <= waited < TIMEOUT + 1.0
    assert refused.value.reason == "TENANT_STREAMS_BUSY"
    assert refused.value.retry_after == TIMEOUT
    async with budget.message("alice"):  # released on exit; the refused waiter took none
        pass


async def test_a_waiter_gets_the_permit_when_it_is_released_in_time() -> None:
    budget = _budget(timeout=30.0)  # a stalled machine cannot make the waiter give up
    order: list[str] = []

    async def second() -> None:
        async with budget.message("alice"):
            order.append("second")

    async with budget.message("alice"):
        waiter = asyncio.create_task(second())
        await asyncio.sleep(TIMEOUT / 4)
        order.append("first")
    await waiter
    assert order == ["first", "second"]


async def test_a_cancelled_waiter_leaves_the_permits_whole() -> None:
    budget = _budget(permits=2)
    async with budget.message("alice"), budget.message("alice"):
        waiters = [asyncio.create_task(_enter(budget)) for _ in range(5)]
        await asyncio.sleep(0)
        for waiter in waiters[:3]:
            waiter.cancel()
        done = await asyncio.gather(*waiters, return_exceptions=True)
    assert sum(isinstance(d, asyncio.CancelledError) for d in done) == 3
    assert sum(isinstance(d, ResourceExhausted) for d in done) == 2
    # Both permits are back: two holders at once, and no third.
    async with budget.message("alice"), budget.message("alice"):
        with pytest.raises(ResourceExhausted):
            await _enter(budget)


async def _enter(budget: StreamBudget) -> None:
    async with budget.message("alice"):
        pass
