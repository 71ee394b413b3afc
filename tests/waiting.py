"""Condition waits for tests: wait until something holds, under a deadline, never for a time.

Prefer awaiting the thing itself (an event, a task, a stream's next item, a process's line).
These two are for state that offers nothing to await: rows in a database another process writes,
a file a child process appends to, a queue inside a library. They look again every ``interval``
seconds until the condition holds, and fail with ``what`` and the last ``state`` once ``timeout``
has passed. The timeouts are hang guards, never a measure of speed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

TIMEOUT = 30.0  # a hang guard: a loaded CI machine is slow, never this slow


async def eventually(
    check: Callable[[], Awaitable[object]] | Callable[[], object],
    *,
    what: str,
    timeout: float = TIMEOUT,  # noqa: ASYNC109 - applied with asyncio.timeout, inside
    interval: float = 0.02,
    state: Callable[[], object] | None = None,
) -> None:
    """Until ``check()`` (awaited if it returns an awaitable) is truthy; fails after ``timeout``
    seconds, naming ``what`` and ``state()``. ``interval=0`` only yields to the loop between
    looks (for state that tasks in this loop change)."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                seen = check()
                if isinstance(seen, Awaitable):
                    seen = await seen
                if seen:
                    return
                # the one sleep of the polling waits: the state has no event to await
                await asyncio.sleep(interval)
    except TimeoutError:
        detail = f": {state()}" if state is not None else ""
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{detail}") from None


def holds_within(
    condition: Callable[[], object], seconds: float, *, interval: float = 0.05
) -> bool:
    """Whether ``condition()`` holds within ``seconds`` (blocking; for code with no event loop,
    such as a test driving child processes, where not holding is an answer, not a failure)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        # the one blocking sleep of the polling waits: another process's state, nothing to await
        time.sleep(interval)
    return True


def wait_for(
    condition: Callable[[], object],
    *,
    what: str,
    timeout: float = TIMEOUT,
    interval: float = 0.05,
    state: Callable[[], object] | None = None,
) -> None:
    """``eventually`` for code with no event loop: blocks until ``condition()`` holds."""
    if not holds_within(condition, timeout, interval=interval):
        detail = f": {state()}" if state is not None else ""
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{detail}")
