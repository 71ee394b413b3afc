"""What the CLI tells a person to type runs as printed, from where they are, with the program
``make demo`` installed (``.venv/bin/fiduciary``, not on PATH); an ``--agent`` module in the
current directory is found without ``PYTHONPATH=.``; and a demo interrupted at its question
continues, as its hint says, with the demo's remaining steps."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest

from fiduciary.events import UserMessage
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.wallet.demo import DEMO_CONVERSATION

from .support import environment

pytestmark = pytest.mark.timeout(300)

PROMPT = "Approve? [y/N] "
PROGRAM = Path(sys.executable).parent / "fiduciary"  # what `make demo` installs
MODULE = """\
from fiduciary.server.served import wallet_agent


def my_agent(store):
    return wallet_agent(store)
"""


def _person() -> dict[str, str]:
    """A shell where the venv is not activated: its bin is not on PATH."""
    env = environment()
    bin_dir = str(PROGRAM.parent)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != bin_dir)
    env.pop("PYTHONPATH", None)
    return env


def interrupt_at_the_question(args: list[str], cwd: Path) -> tuple[int, str]:
    """``args`` run by a person in ``cwd``, one Ctrl-C once it asks; its exit code and stderr."""
    person = subprocess.Popen(
        args,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_person(),
    )
    assert person.stdout is not None
    shown = ""
    while not shown.endswith(PROMPT):
        char = person.stdout.read(1)
        assert char, shown  # it ended without asking
        shown += char
    person.send_signal(signal.SIGINT)
    _, err = person.communicate(timeout=120)
    return person.returncode, err


def pasted(command: str, cwd: Path, answers: str) -> subprocess.CompletedProcess[str]:
    """A hint pasted into the person's shell, in the same directory."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        input=answers,
        capture_output=True,
        text=True,
        env=_person(),
        timeout=120,
        check=False,
    )


def said(db: Path) -> dict[UUID, tuple[str, list[str]]]:
    """Each run's status and what the person said in it."""

    async def read() -> dict[UUID, tuple[str, list[str]]]:
        store = SQLiteStore(db)
        try:
            found: dict[UUID, tuple[str, list[str]]] = {}
            for run in await store.list_runs():
                events = await store.read_events(run.run_id)
                texts = [e.text for e in events if isinstance(e, UserMessage)]
                found[run.run_id] = (run.status, texts)
            return found
        finally:
            await store.close()

    return asyncio.run(read())


def hint(err: str, before: str, after: str = "\n") -> str:
    found = re.search(re.escape(before) + r"(.*?)" + re.escape(after), err, re.S)
    assert found, err
    return found[1]


def test_an_interrupted_demo_continues_all_its_steps_as_its_hint_says(tmp_path: Path) -> None:
    code, err = interrupt_at_the_question([str(PROGRAM), "demo", "--db", "demo.sqlite3"], tmp_path)
    assert code == 130, err
    ((run_id, (status, told)),) = said(tmp_path / "demo.sqlite3").items()
    assert status == "awaiting_approval"
    assert told == list(DEMO_CONVERSATION[:2])
    command = hint(err, "Continue the demo with: ", " (it offers this run first")
    assert command == f"{PROGRAM} demo --db demo.sqlite3"  # not on PATH: by its path

    resumed = pasted(command, tmp_path, "c\n" + "y\n" * 10)

    assert resumed.returncode == 0, resumed.stderr
    assert said(tmp_path / "demo.sqlite3") == {run_id: ("completed", list(DEMO_CONVERSATION))}


def test_an_agent_module_in_the_current_directory_and_the_resume_hint(tmp_path: Path) -> None:
    (tmp_path / "mywallet.py").write_text(MODULE, encoding="utf-8")
    code, err = interrupt_at_the_question([str(PROGRAM), "demo", "--db", "demo.sqlite3"], tmp_path)
    assert code == 130, err
    (run_id,) = said(tmp_path / "demo.sqlite3")
    resume = [str(PROGRAM), "runs", "resume", str(run_id), "--db", "demo.sqlite3"]

    code, err = interrupt_at_the_question([*resume, "--agent", "mywallet:my_agent"], tmp_path)

    assert code == 130, err  # the module was imported: the run's question was asked again
    command = hint(err, "Continue it with: ")
    agent = "--agent mywallet:my_agent"
    assert command == f"{PROGRAM} runs resume {run_id} --db demo.sqlite3 {agent}"
    resumed = pasted(command, tmp_path, "y\n")
    assert resumed.returncode == 0, resumed.stderr
    status, told = said(tmp_path / "demo.sqlite3")[run_id]
    assert (status, told) == ("completed", list(DEMO_CONVERSATION[:2]))  # this message only
