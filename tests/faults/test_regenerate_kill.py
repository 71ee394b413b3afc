"""A card made anew across a SIGKILL: the process dies after the old approval was superseded
and before the new card was written; a new process makes the new card, and the run ends with
exactly one approval that can be approved."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from .harness import run_child

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CHILD = Path(__file__).with_name("regenerate_child.py")


def child(*args: str) -> subprocess.CompletedProcess[str]:
    return run_child(CHILD, *args)


def test_killed_between_supersede_and_the_new_card_one_approval_lives(tmp_path: Path) -> None:
    db, wallet = str(tmp_path / "runs.sqlite3"), str(tmp_path / "wallet.sqlite3")
    started = child("start", db, wallet)
    assert started.returncode == 0, started.stderr
    first = json.loads(started.stdout.splitlines()[-1])
    old = first["approval_id"]

    killed = child("regenerate", db, wallet, old)
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    resumed = child("resume", db, wallet, first["run_id"])
    assert resumed.returncode == 0, resumed.stderr
    seen = json.loads(resumed.stdout.splitlines()[-1])
    assert seen["resumed"] == [first["run_id"]]  # the decision's wake marker found it
    live = [a for a, status in seen["approvals"].items() if status == "pending"]
    assert len(live) == 1
    assert seen["approvals"][old] == "superseded"
    assert seen["cards"] == [[old, None], [live[0], old]]
