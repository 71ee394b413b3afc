"""A provider that reuses call ids: the same payment asked for in two turns, both as ``call_0``.

OpenAI-compatible servers that send no call ids, and providers that number calls from 0 on every
turn, produce exactly this. The person asked for two payments; two must be made. Run as a
module, it drives the run in a process that SIGKILLs itself at a chosen point (``crash``), so a
test can resume it elsewhere and check that no payment ran twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fiduciary import Agent, CallContext, Policy, capability
from fiduciary.capabilities import Capability
from fiduciary.clock import Clock
from fiduciary.models.base import (
    AssistantMessage,
    Model,
    ModelEvent,
    ModelRequest,
    StreamStop,
    StreamTextDelta,
    StreamToolCall,
)
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import allow_all, collect

from .scenario_payments import EffectTarget

MESSAGE = "send bob 5 dollars, then send him 5 more"
SEND = '{"payee": "bob", "amount": "5"}'


class ReusedIds:
    """Asks for the same send in two turns, each time with the id ``call_0``; then answers.

    Its step is read from the request (the assistant turns so far), so it continues correctly
    in a new process after a crash. ``crash_on_turn``: SIGKILL this process when asked for
    that turn (0-based).
    """

    name = "reused-ids"

    def __init__(self, crash_on_turn: int | None = None) -> None:
        self.crash_on_turn = crash_on_turn

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        return self._turn(request)

    async def _turn(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        turn = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if turn == self.crash_on_turn:
            os.kill(os.getpid(), signal.SIGKILL)
        if turn < 2:
            yield StreamToolCall("call_0", "send", SEND)
            yield StreamStop("tool_use")
        else:
            yield StreamTextDelta("Sent bob 5 dollars twice.")
            yield StreamStop("end_turn")


def capabilities(
    target: EffectTarget, *, crash_after_effect: int | None = None
) -> list[Capability]:
    """``send`` applies each idempotency key once at the target; ``crash_after_effect``: SIGKILL
    this process right after the n-th effect (1-based), before fiduciary records it."""

    @capability(kind="execute", operation="send", tier="auto")
    async def send(payee: str, amount: str, ctx: CallContext) -> dict[str, Any]:
        """Send money to a payee."""
        target.enter(ctx.idempotency_key)
        target.apply(ctx.idempotency_key, payee, amount)  # type: ignore[arg-type]
        if crash_after_effect is not None and len(target.entries()) == crash_after_effect:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"payee": payee, "amount": amount}

    return [send]


def agent(
    store: Store,
    target: EffectTarget,
    *,
    model: Model | None = None,
    crash_after_effect: int | None = None,
    clock: Clock | None = None,
) -> Agent:
    return Agent(
        model=model or ReusedIds(),
        capabilities=capabilities(target, crash_after_effect=crash_after_effect),
        store=store,
        policy=Policy(preset="balanced"),
        authorize=allow_all,
        clock=clock,
        lease_seconds=5,
    )


async def _run_until_killed(db: Path, effects: Path, crash: str) -> None:
    point, n = crash.split("=")
    a = agent(
        SQLiteStore(db),
        EffectTarget(effects),
        model=ReusedIds(crash_on_turn=int(n) if point == "turn" else None),
        crash_after_effect=int(n) if point == "effect" else None,
    )
    await collect(a.run(MESSAGE, principal="alice"))
    await a.store.close()


def main(argv: list[str]) -> None:
    db, effects, crash = Path(argv[0]), Path(argv[1]), argv[2]
    asyncio.run(_run_until_killed(db, effects, crash))
    raise SystemExit("the run ended without reaching its crash point")


if __name__ == "__main__":
    main(sys.argv[1:])
