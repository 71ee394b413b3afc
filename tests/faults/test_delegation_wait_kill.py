"""SIGKILL a process driving a parent run and its delegated child at sampled store writes
(real subprocesses, SQLite and PostgreSQL); a new process's sweep must finish both with the
outcome of a run without the crash: the child's answer in the parent's log once, the child's
payment executed at most once (the ledger), no run stranded, no lease left held.

``auto``: the payment needs nobody; the kill lands anywhere in the first process (the parent's
turn, the child's first drive, the parent suspending). ``confirm``: the payment waits for a
person; the parent waits ``awaiting_child``; the process that approves it (and sweeps) is
killed, and the next one approves it if the decision was lost, then sweeps.

The kill points are sampled per run (``FIDUCIARY_DELEGATION_KILLS``, default 6, from a random
seed shown in every failure; ``FIDUCIARY_DELEGATION_SEED`` plays a sample again).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.postgres_support import new_database

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = Path(__file__).with_name("delegation_wait_child.py")
T0, T1, T2 = (f"2026-01-01T00:0{m}:00+00:00" for m in (0, 1, 2))  # each past 30 s leases
KILLS = int(os.environ.get("FIDUCIARY_DELEGATION_KILLS", "6"))
SEED = int(os.environ.get("FIDUCIARY_DELEGATION_SEED") or random.SystemRandom().randrange(2**32))


def play(backend: str, db: str, tmp: Path, now: str, flavor: str, mode: str) -> dict[str, Any]:
    """One process; its report, or ``{"killed": True}`` when it was SIGKILLed."""
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'src'}"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), backend, db, str(tmp / "effects.txt"), now, flavor, mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if done.returncode == -9:
        return {"killed": True}
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


async def database(backend: str, tmp: Path) -> str:
    return await new_database() if backend == "postgres" else str(tmp / "runs.sqlite3")


def assert_finished(report: dict[str, Any], clean: dict[str, Any], point: str) -> None:
    why = f"kill {point} (FIDUCIARY_DELEGATION_SEED={SEED}): {report}"
    assert report["status"] == "completed", why
    assert report["lease_owner"] is None, why
    assert report["runs"] == ["completed", "completed"], why  # nothing stranded
    # the child's answer reached the parent once, and is what the parent relayed
    (end,) = report["delegate_ends"]
    assert end["status"] == "completed", why
    assert report["final"] == [f"the worker said: {end['text']}"], why
    # the payment: at most once, and once unless its outcome is honestly unknown
    assert len(report["effects"]) == len(set(report["effects"])) <= 1, why
    assert len(report["ledger"]) == 1, why
    if report["pay_recovery"] != ["unknown"]:
        assert report["effects"] == clean["effects"], why
        assert report["final"] == clean["final"], why
    else:  # started before the kill, not known to be done: never run again
        assert report["ledger"] == ["started"], why
        assert "outcome_unknown" in end["text"], why


def points(writes: int) -> list[str]:
    rng = random.Random(f"{SEED}:{writes}")
    every = [f"{n}:{w}" for n in range(1, writes + 1) for w in ("before", "after")]
    return sorted(rng.sample(every, min(KILLS, len(every))))


@pytest.mark.parametrize("flavor", ["auto", "confirm"])
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_killed_anywhere_then_swept(backend: str, flavor: str, tmp_path: Path) -> None:
    base = tmp_path / "clean"
    base.mkdir()
    db = await database(backend, base)
    clean = play(backend, db, base, T0, flavor, "start")
    first = "start" if flavor == "auto" else "approve"
    if flavor == "confirm":  # the parent waits, durably, for its child waiting for a person
        assert clean["status"] == "awaiting_child"
        assert clean["lease_owner"] is None
        assert clean["runs"] == ["awaiting_approval", "awaiting_child"]
        clean = play(backend, db, base, T1, flavor, "approve")
    assert clean["final"] == ["the worker said: paid $" + ("3" if flavor == "auto" else "900")]
    assert len(clean["effects"]) == 1
    killed = 0
    for point in points(clean["writes"]):
        tmp = tmp_path / point.replace(":", "-")
        tmp.mkdir()
        db = await database(backend, tmp)
        if flavor == "confirm":
            waiting = play(backend, db, tmp, T0, flavor, "start")
            assert waiting["status"] == "awaiting_child", point
        at = T0 if flavor == "auto" else T1
        report = play(backend, db, tmp, at, flavor, f"{first}:kill:{point}")
        killed += bool(report.get("killed"))
        final = play(backend, db, tmp, T2, flavor, "finish")
        if final["status"] is None:  # killed before the run was recorded: nothing happened
            assert (final["runs"], final["effects"]) == ([], []), point
            continue
        assert_finished(final, clean, point)
    assert killed, f"no sampled point killed the process (FIDUCIARY_DELEGATION_SEED={SEED})"
