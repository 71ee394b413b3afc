"""The sync API: ``run_sync`` and friends, for scripts and notebooks.

Each function blocks until the async call it mirrors is done. All of them run their coroutines
on one event loop of fiduciary's own, in a daemon thread started on first use, so that:

- they work where an event loop is already running (Jupyter, IPython, an async framework's
  thread), which ``asyncio.run`` refuses;
- an agent's store keeps one loop across calls (a store's connections, tasks and futures may
  belong to the loop that first used them).

Use an agent either through these functions or through the async API, not both: the async API
would run it on another loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

from .capabilities import Principal
from .events import Event, Origin, PendingAction, RunCompleted, TextDelta, TurnRetracted
from .exceptions import RunError
from .stores.base import ApprovalRecord, RunStatus

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from .agent import Agent

__all__ = [
    "RunResult",
    "approve_sync",
    "call_sync",
    "deny_sync",
    "resume_sync",
    "run_sync",
]

T = TypeVar("T")

# how long an interrupted call (Ctrl-C) may take to stop cleanly, releasing its run's lease
_STOP_SECONDS = 10.0
# a waiting thread wakes this often: a Ctrl-C that lands just as it starts to wait (or any one,
# on Windows, where a wait cannot be interrupted) is then acted on within this time
_WAKE_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a ``run_sync`` or ``resume_sync`` call did: the events it streamed, and where the
    run stands now."""

    run_id: UUID
    status: RunStatus
    events: tuple[Event, ...]
    pending: tuple[PendingAction, ...]
    """The run's actions waiting for a decision (``approve_sync`` / ``deny_sync``)."""
    output: Any = None
    """The typed answer (a value of the run's ``output_type``) when these events completed
    the run with one; None otherwise (fiduciary.outputs)."""

    @property
    def text(self) -> str:
        """The model's text in these events (a turn lost in a crash and retracted left out)."""
        parts: list[tuple[int, str]] = []
        for event in self.events:
            if isinstance(event, TextDelta):
                parts.append((event.seq, event.text))
            elif isinstance(event, TurnRetracted):
                parts = [(seq, text) for seq, text in parts if seq < event.from_seq]
        return "".join(text for _, text in parts)


class _Portal:
    """One event loop in a daemon thread, shared by every sync call of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="fiduciary-sync", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RunError(
                "state",
                "a sync call cannot wait on fiduciary's own event loop, which runs this code: "
                "await the async API here",
            )
        stopped = threading.Event()

        async def guarded() -> T:
            try:
                return await coroutine
            finally:
                stopped.set()

        future: concurrent.futures.Future[T] | None = None
        try:
            future = asyncio.run_coroutine_threadsafe(guarded(), self._running_loop())
            while not future.done():
                concurrent.futures.wait((future,), timeout=_WAKE_SECONDS)
            return future.result()
        except BaseException:
            # interrupted (Ctrl-C) while the call runs: stop it, and let it release what it holds
            if future is not None and future.cancel():
                stopped.wait(_STOP_SECONDS)
            raise


_PORTAL = _Portal()


def call_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run any coroutine of fiduciary (``agent.list_runs(...)``, ``store.close()``) to its end
    on the loop the other sync functions use, and return its result."""
    return _PORTAL.call(coroutine)


async def _settle(
    agent: Agent, run_id: UUID | None, stream: AsyncGenerator[Event, None]
) -> RunResult:
    async with aclosing(stream):  # interrupted, the drive stops here, before the call returns
        events = [event async for event in stream]
    rid = events[0].run_id if events else run_id
    if rid is None:  # pragma: no cover - a new run always streams its first events
        raise RunError("invalid", "the run streamed no events")
    run = await agent.get_run(rid)
    waiting = {a.approval_id for a in await agent.pending_approvals(run_id=rid)}
    pending: tuple[PendingAction, ...] = ()
    if waiting:
        # the cards as they were shown (description, guard notes), which may predate this call
        pending = tuple(
            e
            for e in await agent.store.read_events(rid)
            if isinstance(e, PendingAction) and e.approval_id in waiting
        )
    output = None
    if any(isinstance(e, RunCompleted) and e.output is not None for e in events):
        output = await agent.output(rid)  # as recorded: the same value in any process
    return RunResult(
        run_id=rid, status=run.status, events=tuple(events), pending=pending, output=output
    )


def _traced(agent: Agent) -> Agent:
    """The sync API is an entry point: it turns tracing on as the ``OTEL_*`` variables ask
    (imported when called: importing fiduciary loads no feature package)."""
    from .observability.environment import trace_from_env

    return trace_from_env(agent)


def run_sync(
    agent: Agent,
    message: str,
    *,
    principal: Principal | str,
    run_id: UUID | None = None,
    capabilities: Iterable[str] | None = None,
    plan_first: bool = False,
    origin: Origin | None = None,
    output_type: Any = None,
    output_retries: int | None = None,
    deps: Any = None,
) -> RunResult:
    """``agent.run``, blocking: start a run (or continue an idle one) and drive it to its next
    stop: completed, failed, or waiting for a person (then ``result.pending`` holds the cards).
    With an ``output_type``, ``result.output`` is the typed answer.
    """
    stream = _traced(agent).run(
        message,
        principal=principal,
        run_id=run_id,
        capabilities=capabilities,
        plan_first=plan_first,
        origin=origin,
        output_type=output_type,
        output_retries=output_retries,
        deps=deps,
    )
    return _PORTAL.call(_settle(agent, run_id, stream))


def resume_sync(
    agent: Agent, run_id: UUID, *, any_model: bool = False, deps: Any = None
) -> RunResult:
    """``agent.resume``, blocking: continue a run once its approvals are decided (or after a
    crash) to its next stop."""
    stream = _traced(agent).resume(run_id, any_model=any_model, deps=deps)
    return _PORTAL.call(_settle(agent, run_id, stream))


def approve_sync(
    agent: Agent,
    approval: UUID | PendingAction,
    *,
    by: Principal | str,
    edits: Mapping[str, Any] | None = None,
    confirm_amount: Decimal | str | None = None,
    args_digest: str | None = None,
) -> ApprovalRecord:
    """``agent.approve``, blocking. Given the ``PendingAction`` itself (from
    ``result.pending``), the approval binds to the arguments it showed (its ``args_digest``).
    The run goes on with ``resume_sync``."""
    if isinstance(approval, PendingAction):
        approval_id, args_digest = approval.approval_id, args_digest or approval.args_digest
    else:
        approval_id = approval
    return _PORTAL.call(
        agent.approve(
            approval_id,
            by=by,
            edits=edits,
            confirm_amount=confirm_amount,
            args_digest=args_digest,
        )
    )


def deny_sync(
    agent: Agent, approval: UUID | PendingAction, *, by: Principal | str, reason: str = ""
) -> ApprovalRecord:
    """``agent.deny``, blocking: the action never runs; the run goes on with ``resume_sync``."""
    approval_id = approval.approval_id if isinstance(approval, PendingAction) else approval
    return _PORTAL.call(agent.deny(approval_id, by=by, reason=reason))
