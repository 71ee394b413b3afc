"""Workers: processes that drive the runs of a shared store, claimed one batch at a time.

Several workers (on several machines) share one PostgreSQL database. Each claims runnable runs
— new ones, runs whose approvals were decided on any server instance, runs whose worker died —
with ``FOR UPDATE SKIP LOCKED`` and a lease, and drives each with ``Agent.resume`` (the same code
that continues a run after a crash), several at once. A lease that lapses (the worker died or
froze) lets another worker take the run; the new lease's epoch fences the old holder's appends.

The store must offer the ``WorkQueue`` methods (``PostgresStore`` does). Submitting work is the
servers' side: ``submit`` records a run for the workers without driving it here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Iterable
from datetime import datetime
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from ._logs import logger
from .agent import Agent
from .capabilities import Principal
from .events import Origin
from .exceptions import ConfigurationError, FiduciaryError, RunError, StoreError
from .stores.base import CancelChannel, CancelRequest, RunRecord

__all__ = ["WorkQueue", "run_worker", "submit"]

log = logger("fiduciary.worker")


@runtime_checkable
class WorkQueue(Protocol):
    """What a store offers workers (on top of the ``Store`` contract)."""

    @property
    def work_generation(self) -> int:
        """Increases whenever a run may have become claimable."""

    async def claim_runnable(
        self,
        *,
        owner: str,
        now: datetime,
        ttl_seconds: float,
        limit: int = 1,
        exclude: Collection[UUID] = (),
    ) -> list[RunRecord]:
        """Lease up to ``limit`` runnable runs nobody leases (and not in ``exclude``), each with
        a new epoch."""

    async def wait_for_work(self, *, since: int) -> int:
        """Return once ``work_generation`` has passed ``since``."""


async def run_worker(
    agent: Agent,
    *,
    stop: asyncio.Event,
    owner: str | None = None,
    poll_interval: float = 1.0,
    concurrency: int = 16,
    drain_seconds: float = 10.0,
) -> None:
    """Claim and drive runs until ``stop`` is set.

    ``owner`` is the lease owner; it must be ``agent.owner`` (the default), since
    ``Agent.resume`` re-takes the claimed lease under that name. At most ``concurrency`` runs
    are driven at once. When idle, the worker waits for a notification from the store, for a run
    to finish (at once if one finished while it claimed), or ``poll_interval`` seconds — the
    poll is the worker's sweep: it catches what nobody notifies, a lease that lapsed (its holder
    died or froze), an approval that expired, a notification lost with a connection. A claim
    leaves a decision's wake marker until the drive's first commit, so a run claimed by a worker
    that dies at once is claimed again once that lease lapses. Once ``stop`` is set it claims
    nothing more, lets the runs it drives go on for up to ``drain_seconds``, then cancels them
    (their leases are released; another worker continues them).
    """
    queue = agent.store
    if not isinstance(queue, WorkQueue):
        raise ConfigurationError(
            f"{type(queue).__name__} cannot hand out work: workers need a store with "
            "claim_runnable and wait_for_work (PostgresStore)"
        )
    if owner is not None and owner != agent.owner:
        raise ConfigurationError("a worker's owner must be its agent's owner (agent.owner)")
    if concurrency < 1 or poll_interval <= 0:
        raise ConfigurationError("concurrency must be at least 1 and poll_interval positive")
    here = _Driven(agent)
    active, cancelling, refused = here.active, here.cancelling, here.refused
    stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())

    unlisten = queue.on_cancel_request(here.on_cancel) if isinstance(queue, CancelChannel) else None
    try:
        while not stop.is_set():
            seen = queue.work_generation
            # The runs this claim excludes (below). One whose drive or cancellation ends during
            # the claim is claimable, and its release's notification may be the one that woke
            # this loop: waiting on these tasks too (done ones return at once) claims it again
            # now rather than at the next poll.
            excluded = [*active.values(), *cancelling.values()]
            free = concurrency - len(active)
            claimed: list[RunRecord] = []
            if free > 0:
                try:
                    claimed = await queue.claim_runnable(
                        owner=agent.owner,
                        now=agent.clock.now(),
                        ttl_seconds=agent.lease_seconds,
                        limit=free,
                        # never a second drive of a run in this process, nor one it cancels,
                        # nor one it refused (claiming it again and again would spin)
                        exclude=[*active, *cancelling, *refused],
                    )
                except FiduciaryError as exc:
                    log.warning("could not claim runs (%s); trying again", exc)
            for run in claimed:
                here.drive(run)
            if claimed and len(claimed) == free:
                # more may be waiting: claim again as soon as a run finishes
                await _first(stopping, [*excluded, *active.values()], None, seconds=poll_interval)
            elif not claimed:
                notified = asyncio.ensure_future(queue.wait_for_work(since=seen))
                try:
                    running = [*excluded, *active.values()]
                    await _first(stopping, running, notified, seconds=poll_interval)
                finally:
                    notified.cancel()
                    with contextlib.suppress(BaseException):
                        await notified
    finally:
        if unlisten is not None:
            unlisten()
        stopping.cancel()
        await _drain(list(active.values()), drain_seconds)
        await asyncio.gather(*cancelling.values(), return_exceptions=True)


class _Driven:
    """The runs a worker drives, cancels and refused, and the cancel requests it honours."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.active: dict[UUID, asyncio.Task[None]] = {}
        self.principals: dict[UUID, str] = {}  # of the runs driven here
        self.cancelling: dict[UUID, asyncio.Task[None]] = {}
        # runs this agent may not drive: left for another worker's agent
        self.refused: set[UUID] = set()
        # by request id: when a request being honoured last arrived
        self.asked: dict[UUID, float] = {}

    def drive(self, run: RunRecord) -> None:
        """Drive a claimed run in a task of its own."""
        task = asyncio.create_task(
            _drive(self.agent, run, self.refused), name=f"fiduciary-run-{run.run_id}"
        )
        self.active[run.run_id] = task
        self.principals[run.run_id] = run.principal
        task.add_done_callback(_forget(self.active, run.run_id))
        task.add_done_callback(_forget(self.principals, run.run_id))

    def on_cancel(self, request: CancelRequest) -> None:
        """A cancel request for a run driven here: take the run over from the drive, stop the
        drive, record the cancellation — if the requester may cancel it."""
        asked = self.asked
        drive = self.active.get(request.run_id)
        if request.run_id in self.cancelling:
            if request.request_id in asked:  # the same request again: its sender still waits
                asked[request.request_id] = asyncio.get_running_loop().time()
            return
        if drive is None:
            return
        if not request.allowed_for(self.principals[request.run_id]):
            log.warning(
                "run %s: ignored a cancel request of %s, who may not cancel it",
                request.run_id,
                request.by,
            )
            return
        asked[request.request_id] = asyncio.get_running_loop().time()
        task = asyncio.create_task(
            _cancel_drive(self.agent, drive, request, lambda: asked[request.request_id]),
            name=f"fiduciary-cancel-{request.run_id}",
        )
        self.cancelling[request.run_id] = task
        task.add_done_callback(_forget(self.cancelling, request.run_id))
        task.add_done_callback(_forget(asked, request.request_id))


async def _cancel_drive(
    agent: Agent, drive: asyncio.Task[None], request: CancelRequest, asked: Callable[[], float]
) -> None:
    """Take the run over from our own drive (``Agent.taken_over``), stop the drive, then
    record the cancellation under the new lease.

    Each attempt waits ``lease_seconds`` + 1 for the principal's lock. While the requester
    still waits (its request, resent every second, arrived again during the attempt) the run
    is kept, renewed, and the lock is awaited again: releasing it would let another worker
    claim the run and drive it again before it is cancelled. Once the requests stop, the run
    is released and the requester (or a later request) finds it unleased."""
    by = Principal(request.by, frozenset(request.scopes))
    loop = asyncio.get_running_loop()
    try:
        async with agent.taken_over(request.run_id) as taken:
            if taken is None:  # our claim lapsed and another process drives it: it is asked
                return
            drive.cancel()
            await asyncio.wait({drive}, timeout=agent.lease_seconds)
            while True:
                attempt = loop.time()
                try:
                    await agent.cancel(request.run_id, by=by, reason=request.reason, claimed=taken)
                    return
                except RunError as exc:
                    if exc.code != "busy" or asked() < attempt:
                        raise
    except FiduciaryError as exc:  # e.g. state: it ended meanwhile
        log.info(
            "run %s: %s's cancel request was not recorded: %s", request.run_id, request.by, exc
        )


def _forget(active: dict[UUID, Any], run_id: UUID) -> Callable[[asyncio.Task[None]], None]:
    def forget(_: asyncio.Task[None]) -> None:
        active.pop(run_id, None)

    return forget


async def _first(
    stopping: asyncio.Future[Any],
    running: Iterable[asyncio.Task[None]],
    notified: asyncio.Future[Any] | None,
    *,
    seconds: float,
) -> None:
    """Wait for stop, a run finishing, a notification, or ``seconds``."""
    waiting: set[asyncio.Future[Any]] = {stopping, *running}
    if notified is not None:
        waiting.add(notified)
    await asyncio.wait(waiting, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)


async def _drive(agent: Agent, run: RunRecord, refused: set[UUID] | None = None) -> None:
    """Drive one claimed run until it completes, fails or waits for a person; a run this
    agent may not drive (``Agent.check_resumable``) is released untouched and added to
    ``refused``."""
    try:
        # The claim may have lapsed while this task waited to start (a starved process), and
        # another worker may be finishing the run. Unless most of the claim is left (the usual
        # case: the task starts at once), renewing it first proves it is still ours, so that no
        # model is called for a run taken over.
        now = agent.clock.now()
        left = (run.lease_until - now).total_seconds() if run.lease_until else 0.0
        if left < agent.lease_seconds * 2 / 3 and not await agent.store.renew(
            run.run_id, epoch=run.epoch, now=now, ttl_seconds=agent.lease_seconds
        ):
            log.info("run %s: the claim lapsed before it was driven; skipped", run.run_id)
            return
        # driven under the claim itself (no second lease); the drive releases it at the end
        async for _ in agent.resume(run.run_id, claimed=run):
            pass
        return
    except RunError as exc:
        if exc.code == "agent_mismatch" and refused is not None:
            refused.add(run.run_id)  # never claimed here again (the agent logged it, once)
        else:
            log.info("run %s was not driven: %s", run.run_id, exc)
    except StoreError as exc:  # the lease is released; the run is claimable again
        log.warning(
            "run %s stopped: the store failed (%s); it will be claimed again", run.run_id, exc
        )
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await agent.store.release(run.run_id, epoch=run.epoch)
        raise
    except Exception:
        log.exception("driving run %s failed; it can be resumed", run.run_id)
    with contextlib.suppress(Exception):  # the drive did not get to release the claim
        await agent.store.release(run.run_id, epoch=run.epoch)


async def _drain(tasks: list[asyncio.Task[None]], seconds: float) -> None:
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=seconds)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def submit(
    agent: Agent,
    message: str,
    *,
    principal: Principal | str,
    run_id: UUID | None = None,
    capabilities: Iterable[str] | None = None,
    plan_first: bool = False,
    origin: Origin | None = None,
) -> RunRecord:
    """Record a new run for the workers to drive, without driving it here.

    The run is committed (``run_started`` + ``user_message``) exactly as ``Agent.run`` commits
    it, then its lease is released, which makes it claimable and notifies the workers.
    ``origin``: the outside event the message comes from, as in ``Agent.run``.
    """
    return await agent.submit(
        message,
        principal=principal,
        run_id=run_id,
        capabilities=capabilities,
        plan_first=plan_first,
        origin=origin,
    )
