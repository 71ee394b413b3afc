"""SIGKILL at store writes and around every external effect, then resume in a new process.

For each kill point the run must end (completed, once every decision is made), no payee may be
paid twice or with an amount nobody approved, no handler may be entered twice for one key, the
log must be gapless, and what a listener saw before the crash must be a prefix of the final log.

Each play forks a process per phase, so every kill point costs seconds on a busy machine. A run
of the suite plays, per scenario and store, every point around an external effect (where "at
most once" is decided), one write of every phase, and a random sample of the other writes, up
to ``FIDUCIARY_KILL_POINTS`` points (default 16; ``all`` plays every one). The sample's seed is
random per run, so that runs together cover every point, and shown in every failure; set
``FIDUCIARY_KILL_SEED`` to play a failing sample again.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path

import pytest

from fiduciary.events import RunCompleted, decode_event
from tests.postgres_support import create_database

from .harness import (
    BACKENDS,
    SCENARIOS,
    Backend,
    Counters,
    EffectTarget,
    Kill,
    Paths,
    Phase,
    Scenario,
    run_phase,
    seen_events,
)

# each phase has its own hang-catching timeout (``run_phase``); this one only bounds a test that
# keeps making progress, on a machine busy enough to make a phase take seconds
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SAMPLE = os.environ.get("FIDUCIARY_KILL_POINTS", "16")
SEED = int(os.environ.get("FIDUCIARY_KILL_SEED") or random.SystemRandom().randrange(2**32))

# every scenario on every durable store; PostgreSQL is skipped when unreachable (failed in CI)
backends = pytest.mark.parametrize(
    "backend",
    [pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else []) for b in BACKENDS],
)


def new_paths(root: Path, backend: Backend) -> Paths:
    """A directory for one play, and a database of its own."""
    root.mkdir(parents=True, exist_ok=True)
    if backend == "postgres":
        return Paths(root, backend, create_database())
    return Paths(root, backend)


def play(paths: Paths, scenario: Scenario, kill: Kill | None) -> tuple[list[str], Counters]:
    """Play the scenario's phases, killing at ``kill``; recover and settle. Returns outcomes,
    and the counters of the phase ``kill`` aimed at when it ran to its end (not killed)."""
    outcomes: list[str] = []
    aimed = Counters()
    for step, phase in enumerate(scenario.phases):
        trap = kill if kill and kill.step == step else None
        outcome, counters = run_phase(phase, paths, trap, scenario)
        if trap is not None:
            aimed = counters
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
    return outcomes, aimed


def run_exists(paths: Paths) -> bool:
    return paths.run_exists()


def run_status(paths: Paths) -> str:
    return paths.run_status()


def log_payloads(paths: Paths) -> list[str]:
    rows = paths.payloads()
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1)), "seqs must be gapless"
    return [r[1] for r in rows]


def check(paths: Paths, scenario: Scenario, kill: Kill | None, sample: str = "") -> None:
    where = f"scenario {scenario.name}, kill point {kill} {sample}"
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
    rows = paths.ledger()
    return {
        str(key)
        for key, status, error in rows
        if status == "failed" and error is not None and json.loads(error).get("unknown") is False
    }


def dry_run(tmp: Path, scenario: Scenario, backend: Backend) -> list[tuple[int, int]]:
    """Count store writes and handler entries per phase of an undisturbed play."""
    paths = new_paths(tmp, backend)
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


def sampled(points: list[Kill], budget: str = SAMPLE, seed: int = SEED) -> list[Kill]:
    """Every effect point, one write point of every phase, then random write points, up to
    ``budget`` ("all": every point), in the order they were listed."""
    if budget == "all":
        return points
    rng = random.Random(seed)
    effects = [k for k in points if k.where in ("before_effect", "after_effect")]
    writes = [k for k in points if k not in effects]
    chosen = set(effects)
    for step in sorted({k.step for k in writes}):
        chosen.add(rng.choice([k for k in writes if k.step == step]))
    rest = [k for k in writes if k not in chosen]
    chosen.update(rng.sample(rest, min(len(rest), max(int(budget) - len(chosen), 0))))
    return [k for k in points if k in chosen]


def test_a_sample_keeps_the_effect_points_and_a_write_of_every_phase() -> None:
    points = kill_points([(11, 1), (1, 0), (13, 2), (0, 0), (7, 1)])
    for seed in range(20):
        chosen = sampled(points, "16", seed)
        assert len(chosen) == 16
        assert len(set(chosen)) == 16
        assert {k for k in points if k.where.endswith("effect")} <= set(chosen)
        assert {k.step for k in chosen} == {0, 1, 2, 4}
    assert sampled(points, "16", 1) == sampled(points, "16", 1)
    assert sampled(points, "16", 1) != sampled(points, "16", 2)
    assert sampled(points, "all", 1) == points


@backends
def test_the_scenarios_have_at_least_200_kill_points(tmp_path: Path, backend: Backend) -> None:
    total = sum(len(kill_points(dry_run(tmp_path / s.name, s, backend))) for s in SCENARIOS)
    assert total >= 200, total


@backends
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_kill_point(scenario: Scenario, tmp_path: Path, backend: Backend) -> None:
    counts = dry_run(tmp_path / "dry", scenario, backend)
    points = kill_points(counts)
    assert len(points) >= 20, counts
    chosen = sampled(points)
    sample = f"FIDUCIARY_KILL_SEED={SEED}"
    killed = 0
    for i, kill in enumerate(chosen):
        paths = new_paths(tmp_path / f"k{i}", backend)
        outcomes, aimed = play(paths, scenario, kill)
        if any(o.endswith("killed") for o in outcomes):
            killed += 1
        else:
            # a point that did not fire: its phase did fewer writes this time than in the dry
            # run (how emitted events fall into group commits depends on timing), or the entry
            # refused before its effect (after_effect) — never a trap door reached that did
            # not kill
            if kill.where == "after_effect":
                reached = kill.n in aimed.applied
            elif kill.where == "before_effect":
                reached = kill.n <= aimed.entries
            else:
                reached = kill.n <= aimed.writes
            assert not reached, (str(kill), aimed, counts, sample)
        check(paths, scenario, kill, sample)
    # and most points must really have killed a process
    assert killed >= len(chosen) * 0.75, (killed, len(chosen), counts, sample)


@backends
def test_a_run_killed_right_after_its_first_commit_is_driven_to_the_end(
    tmp_path: Path, backend: Backend
) -> None:
    """A new run is recorded by its first commit (its creation, its first events and, when its
    first turn writes, the ledger row before the effect): a crash just after it leaves a run
    that a new process drives to the end, the write never applied twice."""
    scenario = next(s for s in SCENARIOS if s.name == "auto-chain")
    paths = new_paths(tmp_path, backend)
    outcome, _ = run_phase("start", paths, Kill(0, "after_write", 1), scenario)
    assert outcome == "killed"
    assert paths.run_status() == "running"
    types = [json.loads(payload)["type"] for _, payload in paths.payloads()]
    assert types[:2] == ["run_started", "user_message"]
    assert "tool_call_start" in types  # the first turn joined the creation's commit
    outcome, _ = run_phase("resume", paths, None, scenario)
    assert outcome == "ok"
    check(paths, scenario, None)
