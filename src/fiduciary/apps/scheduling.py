"""Scheduling: an app's ticks, one per slot of its tier, each run once across processes.

A tick has an id derived from the app and its scheduled slot, and a row keyed by both: the first
process to insert the row runs the slot; no other does. Its context (sources, positions, state,
config, permissions, budget) is hashed canonically: unchanged since the last tick → no model call,
recorded as ``unchanged``. A tick of an app whose previous tick is still running or waiting for
a person is recorded as ``busy`` and not run. Each step of a tick is a run with a derived id, so a
tick re-entered (after a crash, or once a person decided) continues where it stopped.

Errors: ``sourceFail`` skip | pause | retry (one more attempt in the same tick), ``executeFail``
skip | pause; ``pause`` pauses the app for ``cooldown``; any policy pauses it after
``max_errors`` consecutive errored ticks.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from ..capabilities import canonical_json
from ..exceptions import RunError
from . import runs
from .hooks import DrivenElsewhereError, Hooks
from .intents import process_intents
from .manifest import Manifest
from .state import AppState
from .tables import AppRecord, TickRecord, TickStatus

__all__ = ["Scheduler", "Source", "TickResult"]

Source = Callable[[], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class TickResult:
    app_id: str
    slot: str
    outcome: str  # ran | waiting | unchanged | busy | paused | error | taken
    run_id: UUID | None = None
    detail: str = ""


class Scheduler:
    """The ticks of apps: slots on their tiers, claimed in the apps' tables, run by ``hooks``."""

    def __init__(
        self,
        *,
        hooks: Hooks,
        state: AppState,
        sources: dict[str, Source],
        positions: Source | None = None,
        tiers: dict[str, float],
        max_errors: int,
        cooldown: timedelta,
        lease_seconds: float,
        owner: str,
    ) -> None:
        self.hooks = hooks
        self.state = state
        self.sources = sources
        self.positions = positions  # what the app's principal holds (a list), in every tick
        self.tiers = tiers
        self.max_errors = max_errors
        self.cooldown = cooldown
        self.lease_seconds = lease_seconds
        self.owner = owner
        self._running: dict[str, asyncio.Task[TickResult]] = {}

    def slot_of(self, manifest: Manifest, now: datetime) -> str:
        """The scheduled slot ``now`` falls in, on the app's tier."""
        every = self.tiers[manifest.tier]
        epoch = now.astimezone(UTC).timestamp()
        start = datetime.fromtimestamp(epoch - epoch % every, UTC)
        return start.isoformat()

    async def tick(self, manifest: Manifest, slot: str | None = None) -> TickResult:
        """Run one tick of an app (the current slot unless given), once across processes."""
        app_id = manifest.id
        tables = self.state.tables
        slot = slot or self.slot_of(manifest, self.state.clock.now())
        record = await self.state.record(app_id)
        rid = runs.step_id(app_id, "tick", slot)
        if not record.enabled:
            return TickResult(app_id, slot, "disabled")
        now = self.state.clock.now()
        if record.paused_until is not None and now < datetime.fromisoformat(record.paused_until):
            return await self._skip(manifest, slot, rid, "paused", record.paused_until)
        existing = await tables.get_tick(app_id, slot)
        if existing is not None:
            return TickResult(app_id, slot, "taken", rid, existing.outcome or existing.status)
        busy = await tables.ticks(app_id, status="running", limit=1)
        busy += await tables.ticks(app_id, status="waiting", limit=1)
        if busy:
            return await self._skip(manifest, slot, rid, "busy", busy[0].slot)
        tick = TickRecord(app_id, slot, str(rid), "running", owner=self.owner, at=now.isoformat())
        if not await tables.claim_tick(tick):
            return TickResult(app_id, slot, "taken", rid)
        return await self._process(manifest, tick)

    async def _skip(
        self, manifest: Manifest, slot: str, rid: UUID, outcome: str, detail: str
    ) -> TickResult:
        tick = TickRecord(
            manifest.id,
            slot,
            str(rid),
            "done",
            outcome,
            detail,
            self.owner,
            self.state.clock.now().isoformat(),
        )
        if not await self.state.tables.claim_tick(tick):  # the slot is another process's
            return TickResult(manifest.id, slot, "taken", rid)
        await self.state.count(manifest.id, f"skipped_{outcome}")
        await self.state.note(manifest.id, f"tick_{outcome}", slot=slot, detail=detail)
        return TickResult(manifest.id, slot, outcome, None, detail)

    async def resume_ticks(self, manifests: Mapping[str, Manifest]) -> list[TickResult]:
        """Continue every tick waiting for a person, and every tick left running by a process
        that has not touched it for ``lease_seconds`` (it died: its runs resume from their
        logs, each step at most once)."""
        done: list[TickResult] = []
        stale = self.state.clock.now() - timedelta(seconds=self.lease_seconds)
        statuses: tuple[TickStatus, ...] = ("running", "waiting")
        for status in statuses:
            for tick in await self.state.tables.ticks(status=status, limit=1000):
                manifest = manifests.get(tick.app_id)
                if manifest is None or tick.app_id in self._running:
                    continue
                if status == "running" and datetime.fromisoformat(tick.at) > stale:
                    continue
                done.append(await self._process(manifest, replace(tick, owner=self.owner)))
        return done

    async def due(self, manifests: Mapping[str, Manifest]) -> list[TickResult]:
        """Tick every enabled app whose current slot has not run (in parallel across apps)."""
        now = self.state.clock.now()
        ticks: list[Awaitable[TickResult]] = []
        for record in await self.state.tables.list_apps():
            manifest = manifests.get(record.app_id)
            if manifest is None or not record.enabled or "tick" not in manifest.hooks:
                continue
            ticks.append(self._guarded(manifest, self.slot_of(manifest, now)))
        return list(await asyncio.gather(*ticks))

    async def _guarded(self, manifest: Manifest, slot: str) -> TickResult:
        """A tick, unless this process is still running the app's previous one (→ busy)."""
        running = self._running.get(manifest.id)
        if running is not None and not running.done():
            rid = runs.step_id(manifest.id, "tick", slot)
            return await self._skip(manifest, slot, rid, "busy", "still running")
        task = asyncio.ensure_future(self.tick(manifest, slot))
        self._running[manifest.id] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done() and self._running.get(manifest.id) is task:
                del self._running[manifest.id]

    async def _process(self, manifest: Manifest, tick: TickRecord) -> TickResult:
        state = self.state
        rid = UUID(tick.run_id)
        record = await state.record(manifest.id)  # restored at each tick start
        fresh = not await self.hooks.answered(manifest, "tick", record, rid)
        try:
            answer: dict[str, Any] | None
            if not await self.hooks.asked(manifest, "tick", record, rid):
                context = await self._context(manifest, record)
                if context is None:
                    pause = manifest.config.errors.source_fail == "pause"
                    return await self._failed(manifest, tick, "a source failed", pause=pause)
                digest = hashlib.sha256(canonical_json(context).encode()).hexdigest()
                if digest == record.last_hash:
                    await state.count(manifest.id, "skipped_unchanged")
                    return await self._finish(manifest, tick, "unchanged", digest[:12])
                record = replace(record, last_hash=digest)
                await state.count(manifest.id, "model_calls")
                await state.save(record)
                answer = await self.hooks.run(manifest, record, "tick", rid, context)
            else:
                answer = await self.hooks.run(manifest, record, "tick", rid)
            if answer is None:
                return await self._finish(manifest, tick, "waiting", "", status="waiting")
            record = await state.apply(
                manifest, await state.record(manifest.id), answer, live=fresh
            )
            done = await process_intents(
                self.hooks, manifest, rid, list(answer.get("intents") or [])
            )
        except DrivenElsewhereError:
            return TickResult(manifest.id, tick.slot, "elsewhere", rid)
        except (RunError, runs.HookOutputError) as exc:
            return await self._failed(manifest, tick, str(exc), pause=False)
        if done.waiting:
            return await self._finish(manifest, tick, "waiting", done.summary, status="waiting")
        records = done.records
        if done.failed and manifest.config.errors.execute_fail == "pause":
            return await self._failed(manifest, tick, done.summary, pause=True, records=records)
        if done.failed:
            return await self._failed(manifest, tick, done.summary, pause=False, records=records)
        record = await state.record(manifest.id)
        await state.save(replace(record, consecutive_errors=0))
        return await self._finish(manifest, tick, "ran", done.summary, records=records)

    async def _context(self, manifest: Manifest, record: AppRecord) -> dict[str, Any] | None:
        """The tick's context (``sources, positions, state, config, permissions, budget``), or
        None when a source (or the positions) failed under the app's error policy."""
        fetched: dict[str, Any] = {}
        for name in manifest.sources:
            if not await self._read(manifest, name, self.sources[name], fetched):
                return None
        held: dict[str, Any] = {}
        if self.positions is not None and not await self._read(
            manifest, "positions", self.positions, held
        ):
            return None
        context = self.state.context(manifest, record)
        context["sources"] = fetched
        context["positions"] = held.get("positions", [])
        return context

    async def _read(
        self, manifest: Manifest, name: str, read: Source, into: dict[str, Any]
    ) -> bool:
        attempts = 2 if manifest.config.errors.source_fail == "retry" else 1
        for attempt in range(attempts):
            try:
                into[name] = await read()
                return True
            except Exception as exc:  # a source's failure is the app's error policy's
                await self.state.note(
                    manifest.id, "source_failed", source=name, error=str(exc)[:200]
                )
                if attempt == attempts - 1:
                    return False
        return False

    async def _pause(self, manifest: Manifest) -> None:
        record = await self.state.record(manifest.id)
        until = (self.state.clock.now() + self.cooldown).isoformat()
        await self.state.save(replace(record, paused_until=until, consecutive_errors=0))
        await self.state.count(manifest.id, "pauses")
        await self.state.note(manifest.id, "paused", until=until)

    async def _failed(
        self,
        manifest: Manifest,
        tick: TickRecord,
        detail: str,
        *,
        pause: bool,
        records: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> TickResult:
        record = await self.state.record(manifest.id)
        record = replace(record, consecutive_errors=record.consecutive_errors + 1)
        await self.state.count(manifest.id, "errors")
        await self.state.save(record)  # the state is persisted on error too
        if pause or record.consecutive_errors >= self.max_errors:
            await self._pause(manifest)
        return await self._finish(manifest, tick, "error", detail, records=records)

    async def _finish(
        self,
        manifest: Manifest,
        tick: TickRecord,
        outcome: str,
        detail: str,
        *,
        status: TickStatus = "done",
        records: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> TickResult:
        """Record the tick's end; only the process whose update ends it writes its log (two
        engines continuing one waiting tick do not record it twice)."""
        done = replace(tick, status=status, outcome=outcome, detail=detail[:500])
        if await self.state.tables.update_tick(done) and status == "done":
            for kind, fields in records:
                await self.state.note(manifest.id, kind, slot=tick.slot, **fields)
            await self.state.note(
                manifest.id, f"tick_{outcome}", slot=tick.slot, detail=detail[:500]
            )
        return TickResult(manifest.id, tick.slot, outcome, UUID(tick.run_id), detail)
