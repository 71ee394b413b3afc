"""SIGKILL during a tick, on SQLite and PostgreSQL: the tick is resumed by the next process,
its intent is executed at most once, and the tick is not fired again."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.postgres_support import new_database

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CHILD = Path(__file__).with_name("apps_child.py")
T0 = "2026-01-01T00:00:00+00:00"
T1 = "2026-01-01T00:01:00+00:00"  # the same 5-minute slot, after the 30 s lease


def child(
    backend: str, db: str, tmp: Path, now: str, kill: str
) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'src'}"}
    args = [backend, db, str(tmp / "effects.db"), str(tmp / "calls.txt"), now, kill]
    return subprocess.run(
        [sys.executable, str(CHILD), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def buys(tmp: Path) -> list[int]:
    path = tmp / "effects.db"
    if not path.exists():
        return []
    with sqlite3.connect(path) as conn:
        try:
            return [n for (n,) in conn.execute("SELECT n FROM buys")]
        except sqlite3.OperationalError:
            return []


@pytest.mark.parametrize("kill", ["before_effect", "after_effect"])
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_sigkill_during_a_tick(backend: str, kill: str, tmp_path: Path) -> None:
    db = await new_database() if backend == "postgres" else str(tmp_path / "f.sqlite3")
    first = child(backend, db, tmp_path, T0, kill)
    assert first.returncode == -9, first.stderr
    before = buys(tmp_path)
    second = child(backend, db, tmp_path, T1, "none")
    assert second.returncode == 0, second.stderr
    results = json.loads(second.stdout.strip().splitlines()[-1])
    # the killed tick is continued (the first result), and the slot is not run again
    assert results[0][0] == "2026-01-01T00:00:00+00:00"
    assert results[0][1] in ("ran", "error")
    assert [r[1] for r in results[1:]] == ["taken"]
    # the tick's model call is not repeated, the buy not executed twice
    assert (tmp_path / "calls.txt").read_text().splitlines() == ["tick"]
    assert buys(tmp_path) == before
    assert all(n == 1 for n in buys(tmp_path))
    if kill == "after_effect":
        assert before == [1]
