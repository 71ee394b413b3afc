"""``fiduciary questions list | answer`` and a question answered at the terminal, in real
``fiduciary`` processes, on a run of a custom agent that asks the person (``ask_person``)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from uuid import UUID

import pytest

from fiduciary.events import PendingAction, RunCompleted
from fiduciary.stores.base import RunRecord
from fiduciary.stores.sqlite import SQLiteStore

# real processes, a dozen of them: seconds each on a busy machine
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

AGENT_MODULE = '''
"""A custom agent that asks which day, then says it."""

from fiduciary import Agent, ask_person
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls

SCRIPT = Script(
    "book",
    [
        ToolCalls(
            [Call("ask_person", {"question": "Which day?", "choices": ["Monday", "Friday"]})]
        ),
        Reply(lambda r: f"Booked for {r['ask_person']['answer']}."),
    ],
)


def make(store) -> Agent:
    return Agent(model=ScriptedModel([SCRIPT]), capabilities=[ask_person()], store=store)
'''


@pytest.fixture
def db(tmp_path: Path) -> Path:
    (tmp_path / "booking_agent.py").write_text(textwrap.dedent(AGENT_MODULE), encoding="utf-8")
    return tmp_path / "runs.sqlite3"


def fiduciary(
    tmp_path: Path, *args: str | Path | UUID, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("FIDUCIARY_MODEL", None)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "400"  # one error line stays one line
    return subprocess.run(
        [sys.executable, "-m", "fiduciary", *(str(a) for a in args)],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def asked(db: Path) -> tuple[UUID, UUID]:
    """A run of the custom agent waiting for the person's answer."""
    import importlib

    async def go() -> tuple[UUID, UUID]:
        sys.path.insert(0, str(db.parent))
        try:
            module = importlib.import_module("booking_agent")
        finally:
            sys.path.remove(str(db.parent))
        store = SQLiteStore(db)
        try:
            events = [e async for e in module.make(store).run("book", principal="alice")]
        finally:
            await store.close()
        sys.modules.pop("booking_agent", None)
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        return events[0].run_id, pending.approval_id

    return asyncio.run(go())


def state(db: Path, run_id: UUID) -> tuple[RunRecord, str]:
    async def go() -> tuple[RunRecord, str]:
        store = SQLiteStore(db)
        try:
            run = await store.get_run(run_id)
            events = await store.read_events(run_id)
        finally:
            await store.close()
        assert run is not None
        done = [e.text for e in events if isinstance(e, RunCompleted)]
        return run, done[-1] if done else ""

    return asyncio.run(go())


AGENT = ("--agent", "booking_agent:make")


def test_listed_answered_once_then_resumed(tmp_path: Path, db: Path) -> None:
    run_id, question_id = asked(db)
    assert state(db, run_id)[0].status == "awaiting_input"

    listed = fiduciary(tmp_path, "questions", "list", "--db", db, "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["question_id"] == str(question_id)
    assert row["question"] == "Which day?"
    assert row["choices"] == ["Monday", "Friday"]
    assert row["status"] == "pending"
    table = fiduciary(tmp_path, "questions", "list", "--db", db)
    assert "Which day?" in table.stdout
    assert "1. Monday | 2. Friday" in table.stdout

    ref = str(question_id)[:8]
    bad = fiduciary(
        tmp_path, "questions", "answer", ref, "Sunday", "--by", "alice", "--db", db, *AGENT
    )
    assert bad.returncode == 1
    assert "must be one of: Monday, Friday (invalid_answer)" in bad.stderr
    other = fiduciary(
        tmp_path, "questions", "answer", ref, "Friday", "--by", "bob", "--db", db, *AGENT
    )
    assert other.returncode == 1
    assert "(forbidden)" in other.stderr
    ok = fiduciary(tmp_path, "questions", "answer", ref, "2", "--by", "alice", "--db", db, *AGENT)
    assert ok.returncode == 0, ok.stderr
    assert "answered" in ok.stdout
    assert "Friday" in ok.stdout
    assert f"runs resume {run_id}" in ok.stdout
    again = fiduciary(
        tmp_path, "questions", "answer", ref, "1", "--by", "alice", "--db", db, *AGENT
    )
    assert again.returncode == 1
    assert "(already_decided)" in again.stderr
    assert (
        fiduciary(tmp_path, "questions", "list", "--db", db).stdout.strip() == "no open questions"
    )

    resumed = fiduciary(tmp_path, "runs", "resume", run_id, "--db", db, *AGENT)
    assert resumed.returncode == 0, resumed.stderr
    run, text = state(db, run_id)
    assert run.status == "completed"
    assert text == "Booked for Friday."


def test_answered_at_the_terminal_when_resumed(tmp_path: Path, db: Path) -> None:
    run_id, _ = asked(db)
    # a wrong answer is asked again; then the choice's number
    resumed = fiduciary(tmp_path, "runs", "resume", run_id, "--db", db, *AGENT, stdin="Sunday\n1\n")
    assert resumed.returncode == 0, resumed.stderr
    assert "the agent asks you" in resumed.stdout
    assert "must be one of" in resumed.stdout
    run, text = state(db, run_id)
    assert run.status == "completed"
    assert text == "Booked for Monday."


def test_no_input_at_the_terminal_leaves_the_question_open(tmp_path: Path, db: Path) -> None:
    run_id, _ = asked(db)
    resumed = fiduciary(tmp_path, "runs", "resume", run_id, "--db", db, *AGENT, stdin="")
    assert "the question stays open" in resumed.stdout
    assert state(db, run_id)[0].status == "awaiting_input"
    listed = fiduciary(tmp_path, "questions", "list", "--db", db, "--json")
    assert json.loads(listed.stdout)["status"] == "pending"
