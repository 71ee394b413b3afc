"""SIGKILL with a delegated child run in flight (a real subprocess), on SQLite and PostgreSQL:
a new process resumes the parent, whose replayed delegate call resumes the same child; the
child's answer reaches the parent once, with the same outcome as a run without the crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.postgres_support import new_database

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CHILD = Path(__file__).with_name("delegation_child.py")
T0 = "2026-01-01T00:00:00+00:00"
T1 = "2026-01-01T00:01:00+00:00"  # after the dead process's 30 s leases


def child(
    backend: str, db: str, tmp: Path, now: str, mode: str
) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'src'}"}
    return subprocess.run(
        [sys.executable, str(CHILD), backend, db, str(tmp / "calls.txt"), now, mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def outcome(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def database(backend: str, tmp: Path, name: str) -> str:
    return await new_database() if backend == "postgres" else str(tmp / f"{name}.sqlite3")


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_sigkill_with_the_child_in_flight(backend: str, tmp_path: Path) -> None:
    clean_dir, crash_dir = tmp_path / "clean", tmp_path / "crash"
    clean_dir.mkdir()
    crash_dir.mkdir()
    clean = outcome(
        child(backend, await database(backend, tmp_path, "clean"), clean_dir, T0, "start")
    )
    assert clean["status"] == "completed"
    assert clean["final"] == ["the worker said: it is $42.00"]

    db = await database(backend, tmp_path, "crash")
    killed = child(backend, db, crash_dir, T0, "start-kill")
    assert killed.returncode == -9, killed.stderr
    assert (crash_dir / "calls.txt").read_text().splitlines() == ["look_up"]
    resumed = outcome(child(backend, db, crash_dir, T1, "resume"))

    # the same outcome as without the crash: one child run, its answer delivered once
    assert resumed["status"] == "completed"
    assert resumed["final"] == clean["final"]
    assert len(resumed["delegate_ends"]) == 1
    assert resumed["delegate_ends"] == clean["delegate_ends"]
    assert resumed["runs"] == clean["runs"] == ["completed", "completed"]
    # the read the kill interrupted was run again (replay safe), in the same child run
    assert (crash_dir / "calls.txt").read_text().splitlines() == ["look_up", "look_up"]
