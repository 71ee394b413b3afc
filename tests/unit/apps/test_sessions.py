"""A model session per app (``session: true``): the app's ticks are turns of one conversation,
its messages turns of another, so the app remembers what it said — across ticks, after a
restart in a new process, compacted like any long conversation; a disable starts afresh."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from fiduciary import ManualClock, MemoryStore
from fiduciary.apps import AppEngine, ManifestError, MemoryAppTables, parse_manifest
from fiduciary.events import Compaction, UserMessage
from fiduciary.testing import allow_all

from .remembering import Remembering

ROOT = Path(__file__).parents[3]

DIARY = """---
id: diary
hooks: [tick, message]
tier: active
session: {session}
sources: [hour]
---
Say what you said last time.
"""


def diary(
    clock: ManualClock, *, session: bool = True, **options: Any
) -> tuple[AppEngine, Remembering]:
    async def hour() -> str:
        return clock.now().isoformat()

    model = Remembering()
    text = DIARY.format(session="true" if session else "false")
    engine = AppEngine(
        model=model,
        capabilities=[],
        store=MemoryStore(),
        tables=MemoryAppTables(),
        principal="alice",
        manifests=[parse_manifest(text, capabilities={}, sources=("hour",))],
        authorize=allow_all,
        clock=clock,
        sources={"hour": hour},
        **options,
    )
    return engine, model


async def tick_session(engine: AppEngine) -> UUID:
    """The run the app's ticks are turns of (any turn's id names it)."""
    record = await engine.record("diary")
    return engine.hooks.run_of(engine.manifest("diary"), "tick", record, UUID(int=0))


async def ticks(engine: AppEngine, clock: ManualClock, n: int) -> list[str]:
    outcomes = []
    for _ in range(n):
        outcomes.append((await engine.tick("diary")).outcome)
        clock.advance(30)
    return outcomes


async def test_an_apps_ticks_are_turns_of_one_conversation() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    engine, _ = diary(clock)
    await engine.enable("diary")
    assert await ticks(engine, clock, 3) == ["ran", "ran", "ran"]
    state = (await engine.record("diary")).state
    assert state == {"turn": 3, "before": "turn 2"}  # it remembers what it said
    session = engine.hooks.run_of(
        engine.manifest("diary"), "tick", await engine.record("diary"), UUID(int=0)
    )
    prompts = [e for e in await engine.store.read_events(session) if isinstance(e, UserMessage)]
    assert len(prompts) == 3
    assert all(p.text.startswith("[app diary] hook tick\n") for p in prompts)


async def test_messages_have_a_session_of_their_own() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    engine, _ = diary(clock)
    await engine.enable("diary")
    await ticks(engine, clock, 2)
    first = await engine.message("diary", "hello")
    second = await engine.message("diary", "again")
    assert (first.reply, second.reply) == ("turn 1", "turn 2")  # not the ticks' turns
    assert first.run_id == second.run_id  # one message session
    assert (await engine.record("diary")).state == {"turn": 2, "before": "turn 1"}
    await ticks(engine, clock, 1)
    assert (await engine.record("diary")).state == {"turn": 3, "before": "turn 2"}


async def test_without_a_session_each_tick_is_a_conversation_alone() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    engine, _ = diary(clock, session=False)
    await engine.enable("diary")
    await ticks(engine, clock, 2)
    assert (await engine.record("diary")).state == {"turn": 1, "before": "nothing"}


async def test_a_disable_starts_a_new_session() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    engine, _ = diary(clock)
    await engine.enable("diary")
    await ticks(engine, clock, 2)
    await engine.disable("diary")
    await engine.enable("diary")
    await ticks(engine, clock, 1)
    assert (await engine.record("diary")).state == {"turn": 1, "before": "nothing"}


async def test_a_long_session_is_compacted_and_goes_on() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    engine, model = diary(clock, context_window=1500)
    await engine.enable("diary")
    assert set(await ticks(engine, clock, 12)) == {"ran"}
    record = await engine.record("diary")
    session = await tick_session(engine)
    events = await engine.store.read_events(session)
    assert any(isinstance(e, Compaction) for e in events)
    assert sum(isinstance(e, UserMessage) for e in events) == 12  # the log keeps every turn
    sent = model.requests[-1].messages
    assert sum(1 for m in sent if getattr(m, "role", "") == "user") < 12  # the model is sent less
    assert record.state["turn"] < 12  # it counts what it is sent now


def test_the_session_survives_a_restart_in_a_new_process(tmp_path: Path) -> None:
    db = str(tmp_path / "diary.sqlite3")
    said = []
    for seconds in (0, 30, 60):  # one process per tick, each started afresh
        done = subprocess.run(
            [sys.executable, "-m", "tests.unit.apps.session_child", db, str(seconds)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        said.append(json.loads(done.stdout))
    assert [s["outcomes"] for s in said] == [["ran"], ["ran"], ["ran"]]
    assert said[2]["state"] == {"turn": 3, "before": "turn 2"}


def test_session_is_true_or_false_in_the_manifest() -> None:
    with pytest.raises(ManifestError, match=r"session: must be true or false"):
        parse_manifest(DIARY.format(session="1"), capabilities={}, sources=("hour",))
    assert not parse_manifest(
        DIARY.replace("session: {session}\n", ""), capabilities={}, sources=("hour",)
    ).session


def child(db: str, seconds: float, *mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.unit.apps.session_child", db, str(seconds), *mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_a_turn_cut_by_sigkill_is_asked_again_once_in_the_session(tmp_path: Path) -> None:
    db, asked = str(tmp_path / "diary.sqlite3"), tmp_path / "asked"
    first = child(db, 0)
    assert first.wait(timeout=60) == 0, first.communicate()[1]
    first.communicate()
    hanging = child(db, 30, "hang", str(asked))
    try:
        deadline = time.monotonic() + 60
        while not asked.exists():  # the second turn is with the model: kill it there
            assert hanging.poll() is None, hanging.communicate()[1]
            assert time.monotonic() < deadline, "the model was never asked"
            time.sleep(0.05)  # a condition polled across processes: no event to wait on
        os.kill(hanging.pid, signal.SIGKILL)
    finally:
        hanging.wait(timeout=30)
        hanging.communicate()
    # later than the dead process's leases: its tick is stale, its session run free
    resumed = child(db, 30 + 120, "resume")
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    done = json.loads(out)
    assert done["outcomes"] == ["ran"]  # the cut tick, finished
    assert done["asked"] == 1  # its turn asked again once, not sent a second time
    assert done["state"] == {"turn": 2, "before": "turn 1"}
