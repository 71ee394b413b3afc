"""``Attention``: sources → record → judge → decision → action, durably.

For each source, in its own task: read the committed cursor, open the source from it, and for
every batch ``take`` it (cursor, seen ring and the events, one transaction) before judging any
event; then judge the taken events one by one, record each decision, act on it and record what
was done. A retryable error (anything but ``PermanentError``) backs off with full jitter and
reopens the source from the committed cursor; a ``PermanentError`` stops that source and is
reported. On start, events taken but not decided are judged, and decisions whose action was not
recorded are acted on (idempotently: a run's id derives from its decision).

The judge sees a window per principal: the latest events (``window_size``) with the decisions
that did something recorded as ``act`` events.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from .._logs import logger
from ..agent import Agent
from ..clock import Clock, SystemClock
from .actions import Notify, RouteAction, act_on, decision_id_of, offers
from .judge import Judge
from .record import AttentionRecord, DecisionRecord
from .types import Batch, Incoming, JudgeInput, PermanentError, Predicate, WindowEvent
from .window import event_json, input_digest

__all__ = ["Attention", "Report", "Source"]

log = logger("fiduciary.attention")

Sleep = Callable[[float], Awaitable[None]]


class Source(Protocol):
    """Yields batches from a cursor (None: from wherever the source starts)."""

    @property
    def name(self) -> str: ...

    def batches(self, cursor: str | None) -> AsyncIterator[Batch]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """Something the attention layer survived or stopped on. ``kind``: ``retry`` (a retryable
    error; the source reopens after ``wait`` seconds), ``stopped`` (a permanent error),
    ``dead_letter`` (an event the judge could not decide), ``action_failed``."""

    kind: str
    source: str
    message: str
    wait: float | None = None


class Attention:
    """Watches ``sources`` and acts on what the ``judge`` decides (see the module docstring)."""

    def __init__(
        self,
        *,
        judge: Judge,
        record: AttentionRecord,
        routes: Mapping[str, RouteAction],
        sources: Sequence[Source] = (),
        agent: Agent | None = None,
        notify: Notify | None = None,
        predicates: Sequence[Predicate] = (),
        window_size: int = 64,
        clock: Clock | None = None,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        initial_backoff: float = 1.0,
        max_backoff: float = 60.0,
        on_report: Callable[[Report], None] | None = None,
    ) -> None:
        if not routes:
            raise ValueError("Attention needs at least one route")
        self.judge = judge
        self.record = record
        self.routes = dict(routes)
        self.sources = list(sources)
        self.agent = agent
        self.notify = notify
        self.predicates = tuple(predicates)
        self.window_size = window_size
        self.clock: Clock = clock or SystemClock()
        self._sleep = sleep
        self._jitter = jitter
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._on_report = on_report
        self._windows: dict[str, deque[WindowEvent]] = {}
        self._encoded: dict[str, deque[str]] = {}  # each window event's JSON, for the digest
        self._recent: dict[str, deque[str]] = {}
        self.reports: deque[Report] = deque(maxlen=1000)
        self.decided = asyncio.Condition()

    # --- running ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Recover, then follow every source until each ends or stops (or this is cancelled)."""
        await self.recover()
        async with asyncio.TaskGroup() as group:
            for source in self.sources:
                group.create_task(self.follow(source))

    async def recover(self) -> None:
        """Act on decisions whose action was not recorded, then judge events taken earlier."""
        for decision in await self.record.unacted():
            event = await self.record.event_of(decision)
            await self._act(decision, event or _stub(decision))
        await self.judge_pending()

    async def follow(self, source: Source) -> None:
        failures = 0
        while True:
            cursor = await self.record.cursor(source.name)
            try:
                await self.judge_pending(source.name)
                async for batch in source.batches(cursor):
                    await self.accept(source.name, batch)
                    failures = 0
                return
            except PermanentError as exc:
                self._report(Report(kind="stopped", source=source.name, message=str(exc)))
                return
            except Exception as exc:
                failures += 1
                ceiling = min(self._max_backoff, self._initial_backoff * 2 ** (failures - 1))
                wait = ceiling * self._jitter()
                self._report(
                    Report(
                        kind="retry",
                        source=source.name,
                        message=f"{type(exc).__name__}: {exc}",
                        wait=wait,
                    )
                )
                await self._sleep(wait)

    async def accept(self, source: str, batch: Batch) -> list[DecisionRecord]:
        """Take a batch (durably, before anything acts on it), then judge what it brought."""
        others = sorted({e.source for e in batch.events if e.source != source})
        if others:
            log.warning(
                "attention: source %s yielded events whose source field says %s; "
                "they are recorded under %s",
                source,
                ", ".join(others),
                source,
            )
        await self.record.take(source, batch.cursor, batch.events, now=self.clock.now())
        return await self.judge_pending(source, truncated=batch.truncated)

    async def judge_pending(
        self, source: str | None = None, *, truncated: bool = False
    ) -> list[DecisionRecord]:
        out: list[DecisionRecord] = []
        for event in await self.record.pending(source):
            out.append(await self.judge_one(event, truncated=truncated))
        return out

    # --- one event -------------------------------------------------------------------------
    async def judge_one(self, event: Incoming, *, truncated: bool = False) -> DecisionRecord:
        key = event.principal or ""
        window = self._windows.setdefault(key, deque(maxlen=self.window_size))
        encoded = self._encoded.setdefault(key, deque(maxlen=self.window_size))
        recent = self._recent.setdefault(key, deque(maxlen=8))
        seen = WindowEvent(
            role=event.role, type=event.type, at=event.at, data=event.data, id=event.id
        )
        window.append(seen)
        encoded.append(event_json(seen))
        judge_input = JudgeInput(
            routes=offers(self.routes),
            window=tuple(window),
            predicates=self.predicates,
            facts={"source": event.source, "principal": event.principal},
            recent_routes=tuple(recent),
            images=event.images,
            truncated=truncated,
        )
        digest = input_digest(judge_input, encoded)
        base = DecisionRecord(
            decision_id=decision_id_of(event.source, event.id),
            source=event.source,
            event_id=event.id,
            event_type=event.type,
            principal=event.principal,
            at=self.clock.now(),
            kind="decision",
            input_digest=digest,
            route=None,
        )
        try:
            judgment = await self.judge(judge_input)
        except PermanentError as exc:
            decision = await self.record.decide(replace(base, kind="dead_letter", error=str(exc)))
            self._report(Report(kind="dead_letter", source=event.source, message=str(exc)))
            await self.record.acted(decision.decision_id, "none")
            await self._published()
            return decision
        decision = await self.record.decide(
            replace(
                base,
                route=judgment.route,
                probabilities=dict(judgment.probabilities),
                predicates=dict(judgment.predicates),
                model=judgment.model,
                prompt_tokens=judgment.prompt_tokens,
                cost_usd=judgment.cost_usd,
                action="dropped" if self._does(judgment.route) == "drop" else None,
            )
        )
        recent.append(judgment.route)
        if self._does(judgment.route) != "drop":
            act = WindowEvent(role="act", type=f"decided:{judgment.route}", at=base.at, data={})
            window.append(act)
            encoded.append(event_json(act))
        return await self._act(decision, event)

    def _does(self, route: str) -> str | None:
        action = self.routes.get(route)
        return None if action is None else action.do

    async def _act(self, decision: DecisionRecord, event: Incoming) -> DecisionRecord:
        if decision.action is not None:
            await self._published()
            return decision
        if decision.route is None:
            await self.record.acted(decision.decision_id, "none")
        else:
            action = self.routes.get(decision.route)
            try:
                if action is None:
                    raise PermanentError(f"route {decision.route!r} is not in the route map")
                done, run_id = await act_on(
                    decision, event, action, agent=self.agent, notify=self.notify
                )
            except PermanentError as exc:
                self._report(Report(kind="action_failed", source=event.source, message=str(exc)))
                done, run_id = f"failed: {exc}", None
            await self.record.acted(decision.decision_id, done, run_id)
        await self._published()
        found = await self.record.decision_for(decision.source, decision.event_id)
        return found or decision

    async def _published(self) -> None:
        async with self.decided:
            self.decided.notify_all()

    def _report(self, report: Report) -> None:
        self.reports.append(report)
        log.warning("attention %s on %s: %s", report.kind, report.source, report.message)
        if self._on_report is not None:
            self._on_report(report)


def _stub(decision: DecisionRecord) -> Incoming:
    """The event of a decision when its copy is missing (only its identity is known)."""
    return Incoming(
        id=decision.event_id,
        source=decision.source,
        type=decision.event_type,
        at=decision.at,
        principal=decision.principal,
    )
