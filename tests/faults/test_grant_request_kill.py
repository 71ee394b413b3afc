"""A grant the model asked for, across a crash: the process whose app message asked for a
scoped grant (``request_grant``) is killed (SIGKILL) while the run waits for the person;
another process approves; a third resumes the message run. The grant is created, the write
the model retries runs within it — once, counted at the executor — and the reply is the one
of the run without a crash.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .grant_child import saves

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
PHASE_SECONDS = 120.0  # a phase takes about a second; this only catches a hang


def child(phase: str, db: Path, effects: Path, arg: str) -> list[str]:
    argv = [sys.executable, "-m", "tests.faults.grant_child", phase, str(db), str(effects), arg]
    done = subprocess.run(
        argv,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=PHASE_SECONDS,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def start_and_kill_while_waiting(db: Path, effects: Path) -> tuple[str, str]:
    argv = [sys.executable, "-m", "tests.faults.grant_child", "start", str(db), str(effects)]
    with subprocess.Popen(
        argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # blocks until the child reports (or dies: "")
            assert line.startswith("WAITING "), line
            _, run_id, approval_id = line.split()
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=PHASE_SECONDS) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return run_id, approval_id


def test_sigkill_while_a_grant_request_waits_then_approved_and_resumed_elsewhere(
    tmp_path: Path,
) -> None:
    db, effects = tmp_path / "runs.sqlite3", tmp_path / "effects.sqlite3"
    run_id, approval_id = start_and_kill_while_waiting(db, effects)
    assert saves(effects) == []  # nothing ran before the person's approval
    assert child("approve", db, effects, approval_id) == ["APPROVED"]
    [line] = child("resume", db, effects, run_id)
    assert json.loads(line) == {"reply": "saved 60", "waiting": False, "pending": []}
    assert saves(effects) == [1]  # the retried write ran once, within the grant
    # resumed again (a second process, a sweep): nothing more runs
    [again] = child("resume", db, effects, run_id)
    assert json.loads(again)["waiting"] is False
    assert saves(effects) == [1]
