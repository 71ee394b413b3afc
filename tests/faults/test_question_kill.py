"""``ask_person`` across crashes: the process that asked is killed (SIGKILL) while the run awaits
the person's answer, or right after any of its store writes before that; the answer comes from
another process; a third resumes the run (``resume_all``). The outcome is the one of the same
run played without a crash in one process: the same answer reaches the model, the write it
leads to is executed once, the same final text.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest

from fiduciary.events import RunCompleted, ToolCallEnd
from fiduciary.stores.base import Store

from .question_child import open_store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
PHASE_SECONDS = 120.0  # a phase takes about a second; this only catches a hang


def child(phase: str, database: str, effects: Path, arg: str | None = None) -> list[str]:
    """Run one phase to its end; its stdout lines."""
    argv = [sys.executable, "-m", "tests.faults.question_child", phase, database, str(effects)]
    done = subprocess.run(
        [*argv, *([arg] if arg else [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=PHASE_SECONDS,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode in (0, -signal.SIGKILL), done.stderr
    return done.stdout.splitlines()


def start_and_kill_while_waiting(database: str, effects: Path) -> tuple[UUID, UUID]:
    """Start the run; SIGKILL the process once it reports the run awaiting input."""
    argv = [sys.executable, "-m", "tests.faults.question_child", "start", database, str(effects)]
    with subprocess.Popen(
        argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        return _kill_when_waiting(proc)


def _kill_when_waiting(proc: subprocess.Popen[str]) -> tuple[UUID, UUID]:
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the child reports (or dies: "")
        assert line.startswith("WAITING "), line
        _, run_id, question_id = line.split()
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=PHASE_SECONDS) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return UUID(run_id), UUID(question_id)


async def read(database: str, run_id: UUID | None = None) -> tuple[Store, UUID]:
    store = await open_store(database)
    if run_id is None:
        (run,) = await store.list_runs(principal="alice")
        run_id = run.run_id
    return store, run_id


def outcome(database: str) -> dict[str, object]:
    """What the run came to: status, the tool results the model got, the final text."""

    async def go() -> dict[str, object]:
        store, run_id = await read(database)
        try:
            run = await store.get_run(run_id)
            events = await store.read_events(run_id)
            pending = await store.list_approvals(run_id=run_id, status="pending")
        finally:
            await store.close()
        assert run is not None
        ends = [(e.name, json.loads(e.output)) for e in events if isinstance(e, ToolCallEnd)]
        done = [e.text for e in events if isinstance(e, RunCompleted)]
        seqs = [e.seq for e in events]
        assert seqs == list(range(1, len(seqs) + 1))  # gapless
        return {"status": run.status, "results": ends, "text": done, "pending": len(pending)}

    return asyncio.run(go())


def pending_question(database: str) -> tuple[str, str]:
    async def go() -> tuple[str, str]:
        store, run_id = await read(database)
        try:
            run = await store.get_run(run_id)
            (question,) = await store.list_approvals(run_id=run_id, status="pending")
        finally:
            await store.close()
        assert run is not None
        return run.status, str(question.approval_id)

    return asyncio.run(go())


def bookings(effects: Path) -> list[str]:
    if not effects.exists():
        return []
    return [line.split()[1] for line in effects.read_text().splitlines()]


def database_for(backend: str, path: Path) -> str:
    if backend == "postgres":
        from tests.postgres_support import create_database

        return create_database()
    return str(path)


backends = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres])]
)


@backends
def test_killed_while_awaiting_input_then_answered_and_swept(backend: str, tmp_path: Path) -> None:
    base_db = database_for(backend, tmp_path / "baseline.sqlite3")
    child("whole", base_db, tmp_path / "baseline.effects")
    expected = outcome(base_db)
    assert expected["status"] == "completed"
    assert expected["text"] == ["Booked Friday (asked: Friday)."]
    assert bookings(tmp_path / "baseline.effects") == ["Friday"]

    database, effects = database_for(backend, tmp_path / "runs.sqlite3"), tmp_path / "effects"
    run_id, question_id = start_and_kill_while_waiting(database, effects)
    assert pending_question(database) == ("awaiting_input", str(question_id))
    assert child("answer", database, effects, str(question_id)) == [
        "ANSWERED",
        json.dumps({str(run_id): "awaiting_input"}),  # answered; nobody resumed it yet
    ]
    child("sweep", database, effects)
    assert outcome(database) == expected
    assert bookings(effects) == ["Friday"]
    # a second answer, from yet another process, is refused and changes nothing
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.faults.question_child",
            "answer",
            database,
            str(effects),
            str(question_id),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=PHASE_SECONDS,
        check=False,
    )
    assert again.returncode != 0
    assert "already" in again.stderr
    assert outcome(database) == expected


@backends
def test_killed_after_each_write_before_the_question(backend: str, tmp_path: Path) -> None:
    """SIGKILL right after the n-th store write of the asking process, for every n until the
    process gets to wait: the sweep brings the run to the question, which is then answered."""
    base_db = database_for(backend, tmp_path / "baseline.sqlite3")
    child("whole", base_db, tmp_path / "baseline.effects")
    expected = outcome(base_db)
    n = 0
    while True:
        n += 1
        play = tmp_path / f"kill{n}"
        play.mkdir()
        database, effects = database_for(backend, play / "runs.sqlite3"), play / "effects"
        lines = child("start", database, effects, str(n))
        if any(line.startswith("WAITING") for line in lines):
            break  # the process got to the question before its n-th write: every n was played
        try:
            status, question_id = pending_question(database)
        except ValueError:  # no run yet (killed at its creation) or not yet asked
            child("sweep", database, effects)
            status, question_id = pending_question(database)
        if status != "awaiting_input":
            child("sweep", database, effects)
            status, question_id = pending_question(database)
        assert status == "awaiting_input", (n, status)
        child("answer", database, effects, question_id)
        child("sweep", database, effects)
        assert outcome(database) == expected, n
        assert bookings(effects) == ["Friday"], n
    assert n > 2  # the asking process writes more than once before it waits
