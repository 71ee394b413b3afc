"""One Ctrl-C at ``Approve? [y/N]`` ends the demo and says how to resume; the demo started
again offers the run left waiting, to continue or to cancel; either way the rent asked for
twice is paid once, whatever is resumed later."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest

from fiduciary.events import ToolCallEnd
from fiduciary.stores.base import RunRecord
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.wallet.demo import LANDLORD

from .support import argv, environment, fiduciary

pytestmark = pytest.mark.timeout(180)

PROMPT = "Approve? [y/N] "


def interrupt_the_demo(db: Path) -> subprocess.CompletedProcess[str]:
    """``fiduciary demo``, and one Ctrl-C once it asks about the rent."""
    person = subprocess.Popen(
        argv("demo", "--db", db),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    assert person.stdout is not None
    shown = ""
    while not shown.endswith(PROMPT):
        char = person.stdout.read(1)
        assert char, shown  # the demo ended without asking
        shown += char
    person.send_signal(signal.SIGINT)  # once
    out, err = person.communicate(timeout=120)  # the second Ctrl-C is never sent
    return subprocess.CompletedProcess(person.args, person.returncode, shown + out, err)


def runs_and_rent(db: Path) -> tuple[list[RunRecord], int]:
    """The runs in the file, and how many times the landlord was paid across them."""

    async def read() -> tuple[list[RunRecord], int]:
        store = SQLiteStore(db)
        try:
            runs = await store.list_runs()
            paid = 0
            for run in runs:
                for e in await store.read_events(run.run_id):
                    if isinstance(e, ToolCallEnd) and e.name == "send_transfer" and not e.is_error:
                        paid += json.loads(e.output.split("\n")[0])["details"]["to"] == LANDLORD
            return runs, paid
        finally:
            await store.close()

    return asyncio.run(read())


@pytest.fixture
def interrupted(tmp_path: Path) -> tuple[Path, UUID]:
    db = tmp_path / "demo.sqlite3"
    result = interrupt_the_demo(db)
    assert result.returncode == 130, result.stderr
    (run,) = runs_and_rent(db)[0]
    assert run.status == "awaiting_approval"
    assert result.stderr == (  # started as python -c: the same Python runs it again
        f"interrupted: run {run.run_id} waits for your decision. Continue the demo with: "
        f"{sys.executable} -m fiduciary demo --db {db} (it offers this run first, then plays "
        "the demo's remaining steps)\n"
    )
    assert "Traceback" not in result.stdout
    return db, run.run_id


def test_continuing_the_waiting_run_pays_the_rent_once(interrupted: tuple[Path, UUID]) -> None:
    db, run_id = interrupted
    again = fiduciary("demo", "--db", db, input="c\ny\n")
    assert again.returncode == 0, again.stderr
    assert "A demo run from" in again.stdout
    assert f"is waiting for your decision: run {run_id} (send_transfer $75.00)" in " ".join(
        again.stdout.split()
    )
    runs, paid = runs_and_rent(db)
    assert [(r.run_id, r.status) for r in runs] == [(run_id, "completed")]  # no second run
    assert paid == 1
    later = fiduciary("runs", "resume", str(run_id), "--db", db, "--yes")
    assert "is already completed: nothing to resume" in " ".join(later.stdout.split())
    assert runs_and_rent(db)[1] == 1


def test_cancelling_the_waiting_run_means_resuming_it_pays_nothing(
    interrupted: tuple[Path, UUID],
) -> None:
    db, run_id = interrupted
    again = fiduciary("demo", "--db", db, input="x\ny\n")  # cancel it; approve the new rent
    assert again.returncode == 0, again.stderr
    said = " ".join(again.stdout.split())
    assert f"run {run_id} cancelled: what it waited for will never run." in said
    runs, paid = runs_and_rent(db)
    assert {r.run_id: r.status for r in runs}[run_id] == "cancelled"
    assert sorted(r.status for r in runs) == ["cancelled", "completed"]
    assert paid == 1  # the new run's
    later = fiduciary("runs", "resume", str(run_id), "--db", db, "--yes")
    assert "is already cancelled: nothing to resume" in " ".join(later.stdout.split())
    assert runs_and_rent(db)[1] == 1
    assert fiduciary("demo", "--db", db, input="n\n").stdout.count("waiting for your") == 0


def test_resume_interrupted_at_its_question_says_how_to_resume_again(
    interrupted: tuple[Path, UUID],
) -> None:
    db, run_id = interrupted
    person = subprocess.Popen(
        argv("runs", "resume", run_id.hex[:8], "--db", db),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    assert person.stdout is not None
    shown = ""
    while not shown.endswith(PROMPT):
        char = person.stdout.read(1)
        assert char, shown
        shown += char
    person.send_signal(signal.SIGINT)
    _, err = person.communicate(timeout=120)
    assert person.returncode == 130
    assert err.endswith(f"fiduciary runs resume {run_id} --db {db}\n")
    assert runs_and_rent(db) == (runs_and_rent(db)[0], 0)
