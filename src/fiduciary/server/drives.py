"""The runs this server process drives in the background, one drive per run at a time.

A request that starts a run (or adds a message) waits only until the run's first events are
committed (so errors such as a run that is busy are answered at once), then hands the rest of
the stream to a task. A decision resumes the run in a task too. Two drives of one run never
overlap in this process: a resume asked for while the run is driven is run once that drive
ends. Every event a drive yields (already committed) is passed to ``on_event`` (webhooks).

Cancelling stops the drive here, then ``Agent.cancel`` records it under the run's lease.

With ``models`` (``ai.py``), a new run is driven by the agent of the default model at that
moment, and a run resumed or continued by the agent of the model it started with.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Iterable
from contextlib import nullcontext, suppress
from uuid import UUID, uuid4

from .._logs import logger
from ..agent import Agent
from ..capabilities import Principal
from ..events import Event, Origin
from ..exceptions import FiduciaryError, RunError
from ..stores.base import RunRecord
from .ai import ModelChoice

__all__ = ["Drives"]

log = logger("fiduciary.server")

OnEvent = Callable[[Event], None]


class Drives:
    """Background drives of runs, keyed by run id."""

    def __init__(
        self,
        agent: Agent,
        *,
        on_event: OnEvent | None = None,
        cancel_timeout: float = 10.0,
        models: ModelChoice | None = None,
    ) -> None:
        self.agent = agent
        self.models = models
        self._on_event = on_event
        self._cancel_timeout = cancel_timeout
        self._claimed: set[UUID] = set()
        self._tasks: dict[UUID, asyncio.Task[None]] = {}
        self._cancelling: dict[UUID, asyncio.Task[RunRecord]] = {}
        self._again: set[UUID] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    # --- starting ---------------------------------------------------------------------------
    async def start(
        self,
        message: str,
        principal: Principal,
        *,
        capabilities: Iterable[str] | None = None,
        plan_first: bool = False,
        on_claim: Callable[[UUID], None] | None = None,
        origin: Origin | None = None,
    ) -> Event:
        """Create a run; returns its first committed event once the run is recorded."""
        run_id = uuid4()
        agent = self.agent if self.models is None else await self.models.for_new()
        stream = agent.run(
            message,
            principal=principal,
            run_id=run_id,
            capabilities=capabilities,
            plan_first=plan_first,
            origin=origin,
        )
        return await self._begin(run_id, stream, on_claim)

    async def say(
        self,
        run_id: UUID,
        message: str,
        principal: Principal,
        *,
        on_claim: Callable[[UUID], None] | None = None,
        origin: Origin | None = None,
    ) -> Event:
        """Add a message to an idle run; returns the committed ``user_message``."""
        agent = self.agent if self.models is None else await self.models.for_run(run_id)
        stream = agent.run(message, principal=principal, run_id=run_id, origin=origin)
        return await self._begin(run_id, stream, on_claim)

    async def _begin(
        self,
        run_id: UUID,
        stream: AsyncGenerator[Event, None],
        on_claim: Callable[[UUID], None] | None,
    ) -> Event:
        if self._closed or run_id in self._claimed:
            await stream.aclose()  # never started: closing it does nothing
            raise RunError("busy", "the run is still running" if not self._closed else "closing")
        self._claim(run_id)
        if on_claim is not None:
            on_claim(run_id)
        try:
            first = await anext(stream)
        except BaseException:
            self._release(run_id)
            with suppress(Exception):
                await stream.aclose()
            raise
        self._notify(first)
        self._spawn(run_id, stream)
        return first

    def resume(self, run_id: UUID) -> None:
        """Continue a run in the background (after a decision); coalesced while it is driven."""
        if self._closed:
            return
        if run_id in self._claimed:
            self._again.add(run_id)
            return
        self._claim(run_id)
        self._spawn(run_id, self._resume(run_id))

    # --- cancelling -------------------------------------------------------------------------
    async def cancel(
        self,
        run_id: UUID,
        by: Principal,
        reason: str = "",
        keep: Callable[[float], bool] | None = None,
    ) -> RunRecord:
        """Stop the drive here (if any), then have the core record the cancellation (which asks
        the process driving the run, when it is another one and the store carries requests).
        Concurrent cancels of one run share the first one's work and outcome.
        ``keep(since)``: when the principal's lock stays busy past an attempt that started at
        ``since`` (loop time), whether to keep the run taken over from the drive here and try
        again (a requester that still waits), rather than release it (``busy``)."""
        ongoing = self._cancelling.get(run_id)
        if ongoing is None:
            ongoing = asyncio.create_task(self._cancel(run_id, by, reason, keep))
            self._cancelling[run_id] = ongoing
            ongoing.add_done_callback(lambda _: self._cancelling.pop(run_id, None))
        return await asyncio.shield(ongoing)

    async def _cancel(
        self, run_id: UUID, by: Principal, reason: str, keep: Callable[[float], bool] | None
    ) -> RunRecord:
        task = self._tasks.get(run_id)
        if run_id in self._claimed and task is None:
            raise RunError("busy", "the run is starting or being cancelled; retry")
        self._again.discard(run_id)
        # a drive here: take the run over from it first (``Agent.taken_over``), so no worker or
        # other server claims the run while it is cancelled here
        taking = self.agent.taken_over(run_id) if task is not None else nullcontext(None)
        async with taking as taken:
            if task is not None:
                task.cancel()
                with suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(task), self._cancel_timeout)
            self._claim(run_id)  # no resume may start while the cancellation is written
            try:
                while True:
                    attempt = asyncio.get_running_loop().time()
                    try:
                        await self.agent.cancel(run_id, by=by, reason=reason, claimed=taken)
                        break
                    except RunError as exc:
                        if exc.code != "busy" or taken is None or keep is None or not keep(attempt):
                            raise
            finally:
                self._again.discard(run_id)
                self._release(run_id)
        return await self.agent.get_run(run_id)

    # --- tasks ------------------------------------------------------------------------------
    def is_driving(self, run_id: UUID) -> bool:
        """The run is claimed here: driven, starting, or being cancelled."""
        return run_id in self._claimed

    def has_drive(self, run_id: UUID) -> bool:
        """A drive of the run is running here (not only starting or being cancelled)."""
        return run_id in self._tasks and run_id not in self._cancelling

    def _claim(self, run_id: UUID) -> None:
        self._claimed.add(run_id)
        self._idle.clear()

    def _release(self, run_id: UUID) -> None:
        self._claimed.discard(run_id)
        if not self._claimed:
            self._idle.set()

    def _spawn(self, run_id: UUID, stream: AsyncGenerator[Event, None]) -> None:
        task = asyncio.create_task(self._drive(run_id, stream), name=f"fiduciary-drive-{run_id}")
        self._tasks[run_id] = task

    async def _drive(self, run_id: UUID, stream: AsyncGenerator[Event, None]) -> None:
        try:
            async for event in stream:
                self._notify(event)
        except FiduciaryError as exc:
            log.warning("run %s: the drive stopped: %s", run_id, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("run %s: the drive failed", run_id)
        finally:
            with suppress(BaseException):
                await stream.aclose()
            if self._tasks.get(run_id) is asyncio.current_task():
                del self._tasks[run_id]
            if run_id in self._again and not self._closed:
                # a decision arrived meanwhile: drive again, still claimed (never idle between)
                self._again.discard(run_id)
                self._spawn(run_id, self._resume(run_id))
            else:
                self._release(run_id)

    def _resume(self, run_id: UUID) -> AsyncGenerator[Event, None]:
        """The run's own agent's resume (the one of the model it started with)."""
        return self.agent.resume(run_id) if self.models is None else self.models.resumed(run_id)

    def _notify(self, event: Event) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:
            log.exception("run %s: an event listener failed", event.run_id)

    async def wait_idle(self) -> None:
        """Until no run is driven here (for tests and shutdown)."""
        await self._idle.wait()

    async def close(self) -> None:
        """Stop every drive (each run resumes from the store later, here or elsewhere)."""
        self._closed = True
        self._again.clear()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with suppress(BaseException):
                await task
