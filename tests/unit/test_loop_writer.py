"""The writer's own machinery: a commit's steps awaited together (``_together``, in place of
``gather(..., return_exceptions=True)``), and the relay handing out a commit's events."""

from __future__ import annotations

import asyncio

import pytest

from fiduciary._loop.relay import Relay
from fiduciary._loop.writer import _together


async def test_together_gives_each_result_or_error_in_order() -> None:
    async def ok(value: int) -> int:
        return value

    async def fails() -> int:
        raise ValueError("refused")

    outcomes = await _together([ok(1), fails(), ok(3)])
    assert outcomes[0] == 1
    assert outcomes[2] == 3
    assert isinstance(outcomes[1], ValueError)


async def test_together_starts_every_step_before_awaiting_the_first() -> None:
    started: list[int] = []
    gate, both = asyncio.Event(), asyncio.Event()

    async def step(n: int) -> int:
        started.append(n)
        if len(started) == 2:
            both.set()
        await gate.wait()
        return n

    waiting = asyncio.create_task(_together([step(1), step(2)]))
    await asyncio.wait_for(both.wait(), 10)  # the second started while the first waits
    assert started == [1, 2]
    gate.set()
    assert await asyncio.wait_for(waiting, 10) == [1, 2]


async def test_together_cancelled_cancels_the_steps_still_running() -> None:
    never = asyncio.Event()
    entered = asyncio.Event()

    async def hangs() -> None:
        entered.set()
        await never.wait()

    async def fails() -> None:
        raise ValueError("refused")

    steps = [hangs(), fails()]
    waiting = asyncio.create_task(_together(steps))
    await asyncio.wait_for(entered.wait(), 10)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_relay_put_all_wakes_its_reader_once_with_every_item() -> None:
    relay = Relay()
    waiting = asyncio.Event()

    async def read() -> None:
        waiting.set()
        await relay.wait()

    reader = asyncio.create_task(read())
    await asyncio.wait_for(waiting.wait(), 10)
    relay.put_all([1, 2, 3])
    await asyncio.wait_for(reader, 10)
    assert list(relay.items) == [1, 2, 3]
    relay.put_all([])  # nothing to hand out: nothing woken, nothing added
    assert list(relay.items) == [1, 2, 3]
