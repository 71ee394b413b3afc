"""Liveness: every run that can make progress is driven again, by someone, soon — whatever
happens to the processes driving it.

On each backend, real driver processes run while another process (the people) submits runs and
approves their payments: on SQLite two ``fiduciary serve`` on one file; on PostgreSQL two
``fiduciary worker`` and one ``fiduciary serve``. Drivers are struck at random (seeded, the
seed in the failure message; ``LIVENESS_SEED`` replays it) while runs are in flight: a SIGKILL
followed at once by a restart, as a supervisor would (before the dead process's leases lapse),
or a SIGSTOP for up to twice the lease, then SIGCONT; and just after an approval, a SIGKILL of
the driver seen taking it up before it wrote anything. Strikes are paced by time: each waits
for a little of the runs' progress (a few more balance reads or approvals) at most
``STRIKE_WINDOW``, then strikes, whatever happened — all ``STRIKES`` of them, however far the
runs got, so a loaded machine cannot end the test with fewer. The people keep their
submissions in step with the strikes, so at least ``MIN_STRIKES`` of them land before the last
run is submitted, on a slow machine too. Once every strike was made and every run submitted,
every driver is left alone,
and within a bound (the lease, a sweep period and the work left; the timeout only catches a
hang) every run must be terminal: **zero stranded runs**. Besides: no handler entered twice for
one key, no payee paid twice, nothing paid that the person did not approve, gapless logs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from fiduciary.events import decode_event
from tests.waiting import holds_within, wait_for

from .liveness import LEASE_SECONDS, MIN_STRIKES

RUNS = 60
STRIKES = 12  # per backend, every one of them (MIN_STRIKES before the last submission)
STRIKE_WINDOW = LEASE_SECONDS  # a strike waits for the runs' progress at most so long
SWEEP_SECONDS = 0.5
SETTLE_SECONDS = 90.0  # after the last strike; catches a stranded run (a hang), not slowness

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
AGENT = "tests.faults.liveness:liveness_agent"
TERMINAL = ("completed", "failed", "cancelled")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@dataclass
class Fleet:
    """The driver processes, by name, each respawnable with its command line."""

    files: Path
    commands: dict[str, list[str]]
    env: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    figures: Counter[str] = field(default_factory=Counter)

    def spawn(self, name: str, args: list[str] | None = None, module: str = "fiduciary") -> None:
        env = {**self.env, "FIDUCIARY_LIVENESS_NAME": name}
        with (self.files / f"{name}.stderr").open("ab") as log:  # the child keeps its own fd
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", module, *(args or self.commands[name])],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def kill_and_restart(self, name: str) -> None:
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        self.figures["sigkill"] += 1
        self.note(f"SIGKILL {name}, restarted")
        self.spawn(name)  # a supervisor restarts it at once: its old leases are still live

    def freeze(self, name: str, seconds: float) -> None:
        process = self.processes[name]
        process.send_signal(signal.SIGSTOP)
        self.figures["sigstop"] += 1
        self.note(f"SIGSTOP {name} for {seconds:.1f} s")
        # the fault itself lasts a while (past the lease, half the time); nothing is awaited
        time.sleep(seconds)
        process.send_signal(signal.SIGCONT)

    def note(self, line: str) -> None:
        """The strikes, timed, in ``strikes`` (to read a failure by)."""
        with (self.files / "strikes").open("a") as strikes:
            strikes.write(f"{datetime.now(UTC).isoformat()} {line}\n")

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def fleet(files: Path, commands: dict[str, list[str]], target: str) -> Iterator[Fleet]:
    env = {
        **os.environ,
        "FIDUCIARY_LIVENESS_DIR": str(files),
        "FIDUCIARY_POSTGRES": target if target.startswith("postgres") else "",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    made = Fleet(files, commands, env)
    try:
        for name in commands:
            made.spawn(name)
        yield made
    finally:
        made.stop_all()


def taker(files: Path, names: list[str], holders: Callable[[], list[str]]) -> str | None:
    """The driver that holds a suspended run (it claimed it to take a decision up and has not
    written yet), if one is seen within half a second."""
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        owners = {}
        for name in names:
            path = files / f"owner-{name}"
            if path.exists():
                owners[path.read_text()] = name
        for owner in holders():
            if owner in owners:
                return owners[owner]
    return None


@dataclass
class Outcome:
    runs: list[tuple[str, str]]  # run_id, status
    logs: dict[str, list[Any]]  # run_id -> events
    approved: set[tuple[str, str]]  # (run_id, payee) approved by the person


def strike_and_settle(
    files: Path,
    backend: str,
    target: str,
    drivers: dict[str, list[str]],
    read: Callable[[], Outcome],
    holders: Callable[[], list[str]],
) -> tuple[Counter[str], Outcome]:
    """Run the drivers and the people, strike STRIKES times, let it settle; the outcome."""
    seed = int(os.environ.get("LIVENESS_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    (files / "seed").write_text(str(seed))
    began = time.monotonic()
    with fleet(files, drivers, target) as drivers_fleet:
        drivers_fleet.spawn(
            "people",
            ["people", backend, target, str(files), str(RUNS)],
            module="tests.faults.liveness",
        )
        names = sorted(drivers)
        submitted = files / "submitted"

        def all_submitted() -> bool:
            return submitted.exists() and int(submitted.read_text() or 0) == RUNS

        def reached(counter: Path, goal: int) -> bool:
            return lines(counter) >= goal or (all_submitted() and lines(counter) >= RUNS)

        # the first run is in (the store exists, the people are at work): strikes begin
        wait_for(
            lambda: submitted.exists() and submitted.read_text() != "", what="a run", timeout=120.0
        )
        for _ in range(STRIKES):  # each one, whatever the runs' progress: paced by time
            # strike while runs are in flight: after a few more balance reads (mid-run), or
            # just after a decision (as a driver takes it up). Runs that made no progress for
            # STRIKE_WINDOW are struck anyway: the people wait for the strikes
            # (liveness.strikes_before), so waiting for them here could stall.
            counter = files / rng.choice(["reads", "approved"])
            goal = lines(counter) + rng.randint(1, 3)
            holds_within(partial(reached, counter, goal), STRIKE_WINDOW, interval=0.02)
            if not all_submitted():
                drivers_fleet.figures["struck_before_the_last_submission"] += 1
            victim = rng.choice(names)
            taking = taker(files, names, holders) if counter.name == "approved" else None
            if taking is not None:  # a driver taking a decision up, before it wrote anything
                drivers_fleet.figures["sigkill_taking_up_a_decision"] += 1
                drivers_fleet.kill_and_restart(taking)
            elif rng.random() < 0.5:
                drivers_fleet.kill_and_restart(victim)
            else:
                drivers_fleet.freeze(victim, rng.uniform(0.2, 2 * LEASE_SECONDS))
        # every driver alive and running: the rest must happen without anyone acting
        wait_for(all_submitted, what="every run submitted", timeout=120.0)
        calm = time.monotonic()

        def settled() -> bool:
            outcome = read()
            return len(outcome.runs) == RUNS and all(s in TERMINAL for _, s in outcome.runs)

        def stranded() -> list[tuple[str, str]]:
            return [r for r in read().runs if r[1] not in TERMINAL]

        wait_for(
            settled, what=f"every run to end (seed {seed})", timeout=SETTLE_SECONDS, state=stranded
        )
        figures = drivers_fleet.figures
        figures["struck_seconds"] = round(calm - began)
        figures["settle_seconds"] = round(time.monotonic() - calm)
    figures["runs"] = RUNS
    figures["seed"] = seed
    # every strike happened, MIN_STRIKES of them while runs were still being submitted
    assert figures["sigkill"] + figures["sigstop"] == STRIKES, figures
    assert figures["struck_before_the_last_submission"] >= MIN_STRIKES, figures
    return figures, read()


def check_invariants(files: Path, outcome: Outcome) -> None:
    # nothing stranded: every run ended
    assert Counter(s for _, s in outcome.runs) == {"completed": RUNS}
    # gapless logs
    for run_id, events in outcome.logs.items():
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), run_id
    with sqlite3.connect(files / "effects.sqlite3") as effects:
        entries = Counter(k for (k,) in effects.execute("SELECT key FROM entries"))
        paid = effects.execute("SELECT key, payee FROM effects").fetchall()
    # nothing twice: one handler entry per key, one payment per payee (each run pays its own)
    assert all(n == 1 for n in entries.values()), entries.most_common(3)
    assert len({payee for _, payee in paid}) == len(paid)
    # nothing unapproved: every payment is one the person approved, for that run
    for key, payee in paid:
        assert (key.split(":", 1)[0], payee) in outcome.approved, (key, payee)
    # a run whose payment was not made was told its outcome is unknown
    made = {key.split(":", 1)[0] for key, _ in paid}
    for run_id, events in outcome.logs.items():
        if run_id not in made:
            ends = [e for e in events if e.type == "tool_call_end" and e.name == "send"]
            assert ends, run_id
            assert all(e.recovery == "unknown" for e in ends), run_id


def report(figures: Counter[str], backend: str, files: Path) -> None:
    line = json.dumps({"backend": backend, **figures, "stranded": 0})
    print(f"liveness {line}")
    (files / "figures.json").write_text(line)


# --- SQLite: two servers on one file ----------------------------------------------------------


def read_sqlite(path: Path) -> Outcome:
    with sqlite3.connect(path, timeout=60) as conn:
        runs = conn.execute("SELECT run_id, status FROM runs")
        listed = [(str(r), str(s)) for r, s in runs.fetchall()]
        logs: dict[str, list[Any]] = {r: [] for r, _ in listed}
        for run_id, payload in conn.execute("SELECT run_id, payload FROM events ORDER BY seq"):
            logs.setdefault(run_id, []).append(decode_event(payload))
        approved = {
            (str(r), json.loads(a)["payee"])
            for r, a in conn.execute(
                "SELECT run_id, approved_args FROM approvals WHERE status = 'approved'"
            )
        }
    return Outcome(listed, logs, approved)


# a suspended run with a lease: a driver has taken it up and not written yet
HOLDERS = (
    "SELECT lease_owner FROM runs WHERE lease_owner IS NOT NULL "
    "AND status IN ('awaiting_approval', 'awaiting_client_result')"
)


def holders_sqlite(path: Path) -> list[str]:
    with sqlite3.connect(path, timeout=60) as conn:
        return [str(o) for (o,) in conn.execute(HOLDERS)]


def test_sqlite_servers_struck_at_random_leave_no_run_stranded(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    serve = [
        "serve",
        "--db",
        str(db),
        "--agent",
        AGENT,
        "--sweep-seconds",
        str(SWEEP_SECONDS),
        "--rate-limit",
        "1000/60",
    ]
    drivers = {f"serve-{n}": [*serve, "--port", str(free_port())] for n in "12"}
    figures, outcome = strike_and_settle(
        tmp_path, "sqlite", str(db), drivers, lambda: read_sqlite(db), lambda: holders_sqlite(db)
    )
    check_invariants(tmp_path, outcome)
    report(figures, "sqlite", tmp_path)


# --- PostgreSQL: two workers and one server ---------------------------------------------------


def read_postgres(dsn: str) -> Outcome:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        listed = [
            (str(r), str(s)) for r, s in conn.execute("SELECT run_id, status FROM runs").fetchall()
        ]
        logs: dict[str, list[Any]] = {r: [] for r, _ in listed}
        for run_id, payload in conn.execute(
            "SELECT run_id, payload::text FROM events ORDER BY run_id, seq"
        ):
            logs.setdefault(str(run_id), []).append(decode_event(payload))
        approved = {
            (str(r), a["payee"])
            for r, a in conn.execute(
                "SELECT run_id, approved_args FROM approvals WHERE status = 'approved'"
            )
        }
    return Outcome(listed, logs, approved)


def holders_pg(dsn: str) -> list[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return [str(o) for (o,) in conn.execute(HOLDERS)]


@pytest.mark.postgres
def test_postgres_workers_and_a_server_struck_at_random_leave_no_run_stranded(
    tmp_path: Path,
) -> None:
    from tests.postgres_support import create_database

    dsn = create_database()
    worker = ["worker", "--agent", AGENT, "--postgres", dsn, "--poll-interval", str(SWEEP_SECONDS)]
    serve = [
        "serve",
        "--postgres",
        dsn,
        "--agent",
        AGENT,
        "--sweep-seconds",
        str(SWEEP_SECONDS),
        "--rate-limit",
        "1000/60",
        "--port",
        str(free_port()),
    ]
    drivers = {"worker-1": worker, "worker-2": worker, "serve-1": serve}
    figures, outcome = strike_and_settle(
        tmp_path, "postgres", dsn, drivers, lambda: read_postgres(dsn), lambda: holders_pg(dsn)
    )
    check_invariants(tmp_path, outcome)
    report(figures, "postgres", tmp_path)
