"""SIGKILL at every store write and around every external effect, then resume in a new process.

For each kill point the run must end (completed, once every decision is made), no payee may be
paid twice or with an amount nobody approved, no handler may be entered twice for one key, the
log must be gapless, and what a listener saw before the crash must be a prefix of the final log.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from fiduciary.events import RunCompleted, decode_event

from .harness import (
    SCENARIOS,
    EffectTarget,
    Kill,
    Paths,
    Phase,
    Scenario,
    run_phase,
    seen_events,
)

pytestmark = pytest.mark.slow


def play(paths: Paths, scenario: Scenario, kill: Kill | None) -> list[str]:
    """Play the scenario's phases, killing at ``kill``; recover and settle. Returns outcomes."""
    outcomes: list[str] = []
    for step, phase in enumerate(scenario.phases):
        outcome, _ = run_phase(phase, paths, kill if kill and kill.step == step else None, scenario)
        outcomes.append(f"{phase}:{outcome}")
        if outcome == "killed":
            # a new process picks the run up; a run never accepted is simply started again
            again: Phase = "resume" if run_exists(paths) else "start"
            outcome, _ = run_phase(again, paths, None, scenario)
            outcomes.append(f"recover-{again}:{outcome}")
    for _ in range(6):
        status = run_status(paths)
        if status in ("completed", "failed", "cancelled"):
            break
        if status == "awaiting_approval":
            run_phase("decide", paths, None, scenario)
        run_phase("resume", paths, None, scenario)
    return outcomes


def run_exists(paths: Paths) -> bool:
    if not paths.db.exists():
        return False
    with sqlite3.connect(paths.db) as conn:
        try:
            return int(conn.execute("SELECT count(*) FROM runs").fetchone()[0]) > 0
        except sqlite3.OperationalError:  # killed before the schema was created
            return False


def run_status(paths: Paths) -> str:
    with sqlite3.connect(paths.db) as conn:
        rows = conn.execute("SELECT status FROM runs").fetchall()
    assert len(rows) == 1, rows
    return str(rows[0][0])


def log_payloads(paths: Paths) -> list[str]:
    with sqlite3.connect(paths.db) as conn:
        rows = conn.execute("SELECT seq, payload FROM events ORDER BY seq").fetchall()
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1)), "seqs must be gapless"
    return [str(r[1]) for r in rows]


def check(paths: Paths, scenario: Scenario, kill: Kill | None) -> None:
    where = f"scenario {scenario.name}, kill point {kill}"
    assert run_status(paths) == "completed", where
    payloads = log_payloads(paths)
    events = [decode_event(p) for p in payloads]
    assert isinstance(events[-1], RunCompleted), where
    # what a listener saw before (and after) the crash is a prefix of the final log
    for seen in seen_events(paths):
        assert json.loads(payloads[seen["seq"] - 1]) == seen, where
    target = EffectTarget(paths.effects)
    try:
        effects = target.effects()
        entries = target.entries()
    finally:
        target.close()
    payees = Counter(payee for _, payee, _ in effects)
    assert all(n == 1 for n in payees.values()), (where, effects)
    assert {(payee, amount) for _, payee, amount in effects} <= scenario.allowed, (where, effects)
    # a handler is entered again for a key only after an entry known to have had no effect
    # (it refused before acting); never after one that may have acted
    by_key: dict[str, list[int]] = {}
    for key, applied in entries:
        by_key.setdefault(key, []).append(applied)
    for key, applied_flags in by_key.items():
        assert not any(applied_flags[:-1]), (where, key, applied_flags)
        if len(applied_flags) > 1:
            assert refused_keys(paths) >= {key}, (where, key)


def refused_keys(paths: Paths) -> set[str]:
    """Ledger keys whose recorded failure is known to have had no effect."""
    with sqlite3.connect(paths.db) as conn:
        rows = conn.execute("SELECT key, status, error FROM ledger").fetchall()
    return {
        str(key)
        for key, status, error in rows
        if status == "failed" and json.loads(error).get("unknown") is False
    }


def dry_run(tmp: Path, scenario: Scenario) -> list[tuple[int, int]]:
    """Count store writes and handler entries per phase of an undisturbed play."""
    paths = Paths(tmp)
    counts: list[tuple[int, int]] = []
    for phase in scenario.phases:
        outcome, counters = run_phase(phase, paths, None, scenario)
        assert outcome == "ok"
        counts.append((counters.writes, counters.entries))
    check(paths, scenario, None)
    return counts


def kill_points(counts: list[tuple[int, int]]) -> list[Kill]:
    points: list[Kill] = []
    for step, (writes, entries) in enumerate(counts):
        for n in range(1, writes + 1):
            points.append(Kill(step, "before_write", n))
            points.append(Kill(step, "after_write", n))
        for n in range(1, entries + 1):
            points.append(Kill(step, "before_effect", n))
            points.append(Kill(step, "after_effect", n))
    return points


def test_the_scenarios_have_at_least_200_kill_points(tmp_path: Path) -> None:
    total = sum(len(kill_points(dry_run(tmp_path / s.name, s))) for s in SCENARIOS)
    assert total >= 200, total


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_kill_point(scenario: Scenario, tmp_path: Path) -> None:
    counts = dry_run(tmp_path / "dry", scenario)
    points = kill_points(counts)
    assert len(points) >= 20, counts
    killed = 0
    for i, kill in enumerate(points):
        paths = Paths(tmp_path / f"k{i}")
        paths.root.mkdir()
        outcomes = play(paths, scenario, kill)
        killed += any(o.endswith("killed") for o in outcomes)
        check(paths, scenario, kill)
    # almost every point must really have killed a process (some writes only happen sometimes)
    assert killed >= len(points) * 0.9, (killed, len(points))


def test_accepted_run_survives_a_crash_before_its_first_model_call(tmp_path: Path) -> None:
    scenario = next(s for s in SCENARIOS if s.name == "auto-chain")
    paths = Paths(tmp_path)
    outcome, _ = run_phase("start", paths, Kill(0, "after_write", 1), scenario)
    assert outcome == "killed"
    with sqlite3.connect(paths.db) as conn:
        (status,) = conn.execute("SELECT status FROM runs").fetchone()
        types = [r[0] for r in conn.execute("SELECT type FROM events ORDER BY seq")]
    assert status == "running"
    assert types == ["run_started", "user_message"]
    outcome, _ = run_phase("resume", paths, None, scenario)
    assert outcome == "ok"
    check(paths, scenario, None)
