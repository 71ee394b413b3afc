"""The daily autonomous limit from outside: 2 processes x 2 agents x concurrent runs of one
principal, on one SQLite file and on one PostgreSQL database. What was really paid (each
payment appends to a file, outside any store) never passes the limit, and exactly as much as
fits is paid; the rest waits for a person.
"""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from tests.faults.spender import AGENTS, AMOUNT, LIMIT

PROCESSES = 2
RUNS = 5  # per agent: 20 payments of 7 asked for, 14 fit
DEADLINE = 120.0  # seconds: catches a hang, not slowness

pytestmark = [pytest.mark.slow, pytest.mark.timeout(DEADLINE + 60)]
ROOT = Path(__file__).resolve().parents[2]


def spend_from_processes(backend: str, target: str, tmp_path: Path) -> list[Decimal]:
    children = []
    for i in range(PROCESSES):
        effects = tmp_path / f"effects-{i}.txt"
        with (tmp_path / f"spender-{i}.stderr").open("wb") as log:  # the child keeps its own
            child = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.faults.spender",
                    backend,
                    target,
                    str(effects),
                    str(RUNS),
                ],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        children.append(child)
    try:
        for child in children:  # every process has opened its stores and built its agents
            assert child.stdout is not None
            assert child.stdout.readline() == b"ready\n"
        for child in children:  # then all start at once
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            child.stdin.close()
        for i, child in enumerate(children):
            code = child.wait(timeout=DEADLINE)
            stderr = (tmp_path / f"spender-{i}.stderr").read_text()
            assert code == 0, stderr
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
            for pipe in (child.stdin, child.stdout):
                if pipe is not None and not pipe.closed:
                    pipe.close()
    paid = []
    for i in range(PROCESSES):
        effects = tmp_path / f"effects-{i}.txt"
        if effects.exists():
            paid += [Decimal(line) for line in effects.read_text().split()]
    return paid


def check(paid: list[Decimal]) -> None:
    assert sum(paid) <= LIMIT
    fits = int(LIMIT // AMOUNT)
    assert fits < PROCESSES * AGENTS * RUNS  # the scenario asks for more than fits
    assert paid == [AMOUNT] * fits  # as much as fits runs on its own; the rest waits


def test_the_limit_holds_for_processes_on_one_sqlite_file(tmp_path: Path) -> None:
    paid = spend_from_processes("sqlite", str(tmp_path / "runs.sqlite3"), tmp_path)
    check(paid)


@pytest.mark.postgres
def test_the_limit_holds_for_processes_on_one_postgres_database(tmp_path: Path) -> None:
    from tests.postgres_support import create_database

    dsn = create_database()
    paid = spend_from_processes("postgres", dsn, tmp_path)
    check(paid)
