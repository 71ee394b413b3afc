"""SIGKILL at the suspension points of typed output and FallbackModel, then resume in a new
process: the run ends as it does without the crash.

- between an invalid answer (a ``final_result`` call, or text that is not the type) and the
  model's retry: the invalid answer and its errors are in the log, the retry is not;
- between fallback attempts: the primary model failed (overloaded), the secondary is asked;
- between two reads through ``ctx.deps``: the deps given to ``run`` are gone with the
  process; the resuming one makes them with ``deps_factory`` (one without refuses the run).

Each case plays the scenario straight in one process, then again in a process killed at the
point, resumed by another (``typed_child.py``), and compares the two logs event by event.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CHILD = Path(__file__).with_name("typed_child.py")
ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0  # a condition not met by then is a failure (a busy machine takes seconds)


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=WAIT)
    assert process.returncode == 0, err
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _rows(db: Path, sql: str, *params: str) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        try:
            found: int = conn.execute(sql, params).fetchone()[0]
        except sqlite3.OperationalError:  # the schema is not created yet
            return 0
        return found


def _wait_for(what: str, condition: Any, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the process ended before {what}: {process.communicate()}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"not reached within {WAIT}s: {what}")
        time.sleep(0.02)  # polling another process's files: nothing to wait on in between


@pytest.mark.parametrize("scenario", ["output", "output_text", "fallback", "deps"])
def test_killed_at_the_suspension_point_the_run_ends_as_without_the_crash(
    scenario: str, tmp_path: Path
) -> None:
    straight_id, crashed_id = str(uuid4()), str(uuid4())
    straight = _finish(_child("straight", scenario, str(tmp_path / "a.sqlite3"), straight_id, "-"))
    assert straight["status"] == "completed"

    db, marker = tmp_path / "b.sqlite3", tmp_path / "asked"
    start = _child("start", scenario, str(db), crashed_id, str(marker))
    if scenario == "fallback":
        committed = ("SELECT count(*) FROM runs WHERE run_id = ?", crashed_id)
    elif scenario == "deps":
        committed = (
            "SELECT count(*) FROM events WHERE run_id = ? AND type = 'tool_call_end'",
            crashed_id,
        )
    elif scenario == "output":
        committed = (
            "SELECT count(*) FROM events WHERE run_id = ? AND type = 'tool_call_end' "
            "AND payload LIKE '%invalid_answer%'",
            crashed_id,
        )
    else:
        committed = (
            "SELECT count(*) FROM events WHERE run_id = ? AND type = 'turn_complete' "
            "AND payload LIKE '%output_error%'",
            crashed_id,
        )
    _wait_for("the model asked at the point", marker.exists, start)
    _wait_for("the log so far committed", lambda: _rows(db, *committed) > 0, start)
    os.kill(start.pid, signal.SIGKILL)
    start.communicate(timeout=WAIT)
    assert start.returncode == -signal.SIGKILL

    before = _rows(db, "SELECT count(*) FROM events WHERE run_id = ?", crashed_id)
    if scenario == "deps":  # a process with no way to make the deps refuses, touching nothing
        bare = _finish(_child("resume-bare", scenario, str(db), crashed_id, "-"))
        assert bare["refused"] == "agent_mismatch", bare
        assert "deps_factory" in bare["message"]
        assert _rows(db, "SELECT count(*) FROM events WHERE run_id = ?", crashed_id) == before
    resumed = _finish(_child("resume", scenario, str(db), crashed_id, "-"))
    assert resumed["status"] == "completed"
    assert resumed["output"] == straight["output"]
    assert resumed["events"] == straight["events"]  # the same log, event by event
    assert len(resumed["events"]) > before  # (the resume did finish it)
    for file in tmp_path.glob("b.sqlite3*"):  # the database and its WAL: no deps in them
        assert b"deps-secret" not in file.read_bytes()
    if scenario == "deps":
        ends = [e["output"] for e in resumed["events"] if e["type"] == "tool_call_end"]
        assert ends == ['"the ledger of alice\'s shop"'] * 2, ends
    elif scenario == "fallback":
        turn = next(e for e in resumed["events"] if e["type"] == "turn_complete")
        assert turn["model"] == "secondary"
        assert turn["fallbacks"] == [{"model": "primary", "reason": "overloaded"}]
    else:
        assert straight["output"] == {"number": "INV-1", "total": "12.50"}
        done = resumed["events"][-1]
        assert done["type"] == "run_completed"
        assert done["output"] == straight["output"]
