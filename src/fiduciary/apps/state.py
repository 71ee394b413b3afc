"""An app's state: its record (enabled, state, counters, error streak), its log, its grants.

``AppState`` owns what an app keeps between ticks, in the apps' tables: a record read fresh
each time (its counters included), written through on every change (``save`` stamps it), and
the app's log. A hook's answer lands here (``apply``: its ``state`` replaces the app's, its
``emit`` items are logged and broadcast live, ``live.py``), and so does what a person approved
through the engine's own capabilities (an enabling's mode, a grant). It runs nothing: hooks
and ticks are elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from ..capabilities import CallContext
from ..clock import Clock
from . import runs
from .live import AppChannels, AppEmit, parse_emit
from .manifest import Manifest
from .tables import AppRecord, AppTables, GrantRecord, LogEntry

__all__ = ["AppState"]


class AppState:
    """The apps' records and log in ``tables``, stamped with ``clock``."""

    def __init__(
        self, tables: AppTables, clock: Clock, channels: AppChannels | None = None
    ) -> None:
        self.tables = tables
        self.clock = clock
        self.channels = channels or AppChannels()  # the live emits' listeners (live.py)

    async def record(self, app_id: str) -> AppRecord:
        """The app's record as stored (its counters included): read fresh each time."""
        found = await self.tables.get_app(app_id) or AppRecord(app_id)
        return replace(found, counters=await self.tables.counters(app_id))

    async def count(self, app_id: str, name: str, by: int = 1) -> None:
        """Add to one of the app's counters (atomically: concurrent steps lose nothing)."""
        await self.tables.bump(app_id, name, by)

    async def note(self, app_id: str, kind: str, **detail: Any) -> None:
        """One entry of the app's log."""
        at = self.clock.now().isoformat()
        await self.tables.log(LogEntry(app_id, at, kind, detail))

    async def save(self, record: AppRecord) -> None:
        """Write the record through, stamped with the time its state was saved."""
        stamped = replace(record, state_saved_at=self.clock.now().isoformat())
        await self.tables.put_app(stamped)

    async def set_state(self, app_id: str, state: dict[str, Any]) -> None:
        """Replace an app's state (an edit between ticks: the next tick reads it)."""
        record = await self.record(app_id)
        await self.save(replace(record, state=dict(state)))

    async def state_of(self, app_id: str) -> dict[str, Any]:
        """The app's state as stored now (what ``app_state`` answers a hook)."""
        return (await self.record(app_id)).state

    async def apply(
        self, manifest: Manifest, record: AppRecord, answer: Mapping[str, Any], *, live: bool = True
    ) -> AppRecord:
        """A hook's answer: its state replaces the app's (written through), its emits logged
        and, ``live``, broadcast (not for an answer read again when a step is re-entered)."""
        if isinstance(answer.get("state"), dict):
            record = replace(record, state=dict(answer["state"]))
            await self.save(record)
        emits = answer.get("emit")
        for item in emits if isinstance(emits, list) else [emits] if emits else []:
            await self.note(manifest.id, "emit", data=item)
            if live:
                self._publish(manifest.id, *parse_emit(item))
        return record

    async def emit(self, app_id: str, channel: str, data: Any) -> None:
        """An emit of the engine's own (``action:resolved``...): logged, then broadcast."""
        await self.note(app_id, "emit", data={"channel": channel, "data": data})
        self._publish(app_id, channel, data)

    def _publish(self, app_id: str, channel: str, data: Any) -> None:
        self.channels.publish(AppEmit(app_id, channel, data, self.clock.now().isoformat()))

    def context(self, manifest: Manifest, record: AppRecord) -> dict[str, Any]:
        """What every hook is told of the app: state, config, permissions, budget."""
        return {
            "state": record.state,
            "config": manifest.config.as_context(),
            "permissions": list(manifest.permissions),
            "budget": self.budget(manifest, record),
        }

    def budget(self, manifest: Manifest, record: AppRecord) -> dict[str, Any]:
        """The app's limits, what it spent of them, and what remains (USD, as strings)."""
        spent = {
            op: Decimal(record.counters.get(f"spent_cents:{op}", 0)) / 100 for op in manifest.limits
        }
        return {
            "limits": {op: str(v) for op, v in manifest.limits.items()},
            "spent": {op: str(v) for op, v in spent.items()},
            "remaining": {
                op: str(max(v - spent[op], Decimal(0))) for op, v in manifest.limits.items()
            },
        }

    # --- what a person approved through the engine's own capabilities ------------------------
    async def mode_approved(self, app_id: str, mode: str) -> None:
        """``app_enable``'s handler: a person approved exactly this (mode included)."""
        record = await self.record(app_id)
        await self.save(replace(record, approved_mode=mode))
        await self.note(app_id, "enable_approved", mode=mode)

    async def grant(self, spec: dict[str, Any], ctx: CallContext) -> str:
        """``app_grant``'s handler: a person approved exactly this grant; it starts now."""
        grant_id = str(runs.step_id("grant", ctx.idempotency_key))
        expires = self.clock.now() + timedelta(seconds=float(spec["ttl_seconds"]))
        grant = GrantRecord(
            grant_id=grant_id,
            app_id=spec["app_id"],
            principal=ctx.principal.actor_id,
            operations=tuple(spec["operations"]),
            limits_usd={k: str(Decimal(str(v))) for k, v in spec["limits_usd"].items()},
            resources=tuple(spec["resources"]),
            expires_at=expires.isoformat(),
            approval=str(ctx.run_id),
        )
        if await self.tables.add_grant(grant):
            await self.note(
                spec["app_id"], "grant_created", grant=grant_id, expires_at=grant.expires_at
            )
        return grant_id
