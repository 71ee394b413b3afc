"""A call made of steps across a SIGKILL: the process dies after the first step (a swap)
committed and before the second (a save) posts; a new process resumes the run, runs the save
once and never the swap again."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from .harness import run_child

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CHILD = Path(__file__).with_name("steps_child.py")


def child(*args: str) -> subprocess.CompletedProcess[str]:
    return run_child(CHILD, *args)


def test_killed_after_the_first_step_the_resume_runs_the_second_once(tmp_path: Path) -> None:
    db, wallet = str(tmp_path / "runs.sqlite3"), str(tmp_path / "wallet.sqlite3")
    started = child("start", db, wallet)
    assert started.returncode == -signal.SIGKILL, started.stderr
    first = json.loads(started.stdout.splitlines()[0])
    assert first["steps"] == 2  # one card showed both steps

    resumed = child("resume", db, wallet, first["run_id"])
    assert resumed.returncode == 0, resumed.stderr
    seen = json.loads(resumed.stdout.splitlines()[-1])
    assert seen["kinds"].get("swap") == 1  # the swap posted once, before the kill only
    assert seen["kinds"].get("save") == 1  # the save posted once, after the resume
    report = seen["report"]
    assert report["completed"] is True
    assert [s["status"] for s in report["steps"]] == ["done", "done"]
    assert report["steps"][0]["result"]["replayed"] is False  # recorded by the first process

    again = child("resume", db, wallet, first["run_id"])  # nothing left to do
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[-1])["kinds"] == seen["kinds"]
