"""``fiduciary runs show`` and ``runs list`` in a new process, over a manager → worker →
sub-worker delegation made with scripted models: the delegates nested with status and cost,
the parent chain of a delegated run, the typed output as JSON, the fallback model that
answered; ``runs list`` says whose delegate a run is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest

from tests.run_tree_scenario import Tree

from .support import fiduciary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[3]


def made(db: Path) -> Tree:
    """The delegation, made by its own process (python -m tests.run_tree_scenario)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.run_tree_scenario", str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    manager, worker, sub = (line.strip() for line in done.stdout.splitlines())
    return Tree(UUID(manager), UUID(worker), UUID(sub))


def test_runs_show_draws_the_tree_the_parents_the_output_and_the_fallback(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    tree = made(db)
    top = fiduciary("runs", "show", str(tree.manager), "--db", db, "--last", "0", columns=160)
    assert top.returncode == 0, top.stderr
    out = top.stdout
    assert "delegated by" not in out  # a person started it
    typed = out.split("typed output\n", 1)[1].split("delegated to", 1)[0]
    assert json.loads(typed) == {"balance_usd": "42", "checked_by": "worker"}
    lines = out.splitlines()
    [worker] = [line for line in lines if f"delegate worker {str(tree.worker)[:8]}" in line]
    [sub] = [line for line in lines if f"delegate sub {str(tree.sub)[:8]}" in line]
    assert "completed" in worker
    assert "with its delegates" in worker
    assert "check the balance" in worker
    assert "read the balance" in sub
    # nested: the sub-worker's line is indented further than the worker's
    assert sub.index("delegate sub") > worker.index("delegate worker")
    middle = fiduciary("runs", "show", str(tree.worker), "--db", db, "--last", "20", columns=160)
    assert middle.returncode == 0, middle.stderr
    assert "answered by   backup-model (2 turns, fallback)" in middle.stdout
    assert "stop: tool_use · answered by backup-model" in middle.stdout
    assert "typed output" not in middle.stdout
    low = fiduciary("runs", "show", str(tree.sub), "--db", db, "--last", "0", columns=160)
    assert low.returncode == 0, low.stderr
    crumbs = (
        f"how much do I have? ({str(tree.manager)[:8]}) › "
        f"worker: check the balance ({str(tree.worker)[:8]})"
    )
    assert f"delegated by  {crumbs}" in low.stdout
    assert "delegated to" not in low.stdout


def test_runs_list_says_whose_delegate_a_run_is(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    tree = made(db)
    listed = fiduciary("runs", "list", "--db", db, columns=160)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert f"↳ worker of {str(tree.manager)[:8]}: check the balance" in rows[str(tree.worker)[:8]]
    assert f"↳ sub of {str(tree.worker)[:8]}: read the balance" in rows[str(tree.sub)[:8]]
    assert "↳" not in rows[str(tree.manager)[:8]]
    as_json = fiduciary("runs", "list", "--db", db, "--json")
    runs = {r["run_id"]: r for r in map(json.loads, as_json.stdout.splitlines())}
    assert runs[str(tree.sub)]["parent_run_id"] == str(tree.worker)
    assert runs[str(tree.sub)]["delegate"] == "sub"
    assert "parent_run_id" not in runs[str(tree.manager)]
