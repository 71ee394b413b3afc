"""A process of its own for tests/unit/apps/test_sessions.py: an apps engine over a SQLite file
whose app keeps a session; ``python -m tests.unit.apps.session_child DB SECONDS`` (from the
repository's root) enables the app (if it is not
yet), sets the clock to SECONDS past a fixed start, ticks it once, and prints the tick's
outcome and the reply the app's model gave (JSON)."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta

from fiduciary import ManualClock
from fiduciary.apps import AppEngine, SQLiteAppTables, parse_manifest
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import allow_all
from tests.unit.apps.remembering import Remembering

DIARY = """---
id: diary
hooks: [tick]
tier: active
session: true
sources: [hour]
---
Say what you said last time.
"""


async def main(db: str, seconds: float, mode: str, hang_file: str) -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds))

    async def hour() -> str:
        return clock.now().isoformat()

    store = SQLiteStore(db)
    tables = SQLiteAppTables(db)
    manifest = parse_manifest(DIARY, capabilities={}, sources=("hour",))
    engine = AppEngine(
        model=Remembering(hang_at=2 if mode == "hang" else None, hang_file=hang_file),
        capabilities=[],
        store=store,
        tables=tables,
        principal="alice",
        manifests=[manifest],
        authorize=allow_all,
        clock=clock,
        sources={"hour": hour},
    )
    try:
        await engine.enable("diary")
        if mode == "resume":  # what a scheduler's step does for a tick a dead process left
            outcomes = [r.outcome for r in await engine.resume_ticks()]
        else:
            outcomes = [(await engine.tick("diary")).outcome]
        state = (await engine.record("diary")).state
        asked = len(engine.hooks.model.requests)  # type: ignore[attr-defined]
        print(json.dumps({"outcomes": outcomes, "state": state, "asked": asked}))
    finally:
        tables.close()
        await store.close()


if __name__ == "__main__":
    mode = sys.argv[3] if len(sys.argv) > 3 else "tick"
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), mode, sys.argv[4] if mode == "hang" else ""))
