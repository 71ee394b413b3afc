"""A process of the ``ask_person`` crash test (``test_question_kill.py``).

``python -m tests.faults.question_child PHASE DATABASE EFFECTS [ARG]``; DATABASE is a SQLite
path or a PostgreSQL URL or conninfo, EFFECTS a file the ``book`` capability appends to (one
line per booking: the test counts them). Phases:

- ``start``: start the run; once it waits for the person, print ``WAITING <run_id>
  <question_id>`` and block on stdin (the test kills the process with SIGKILL there). With
  ``ARG`` = n, the process kills itself right after its n-th store write instead.
- ``answer``: answer the question ``ARG`` as alice ("Friday"), print ``ANSWERED``; nothing
  else (the run is resumed by another process).
- ``sweep``: resume every run that can be resumed (``resume_all``), until none is left
  running; print the status of each run as JSON.
- ``whole``: the same run without a crash, in this one process (the baseline).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from fiduciary import Agent, CallContext, PendingAction, ask_person, capability
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

PRINCIPAL = "alice"


def _after(results: Any) -> str:
    return f"Booked {results['book']['day']} (asked: {results['ask_person']['answer']})."


SCRIPT = Script(
    "book",
    [
        ToolCalls(
            [Call("ask_person", {"question": "Which day?", "choices": ["Monday", "Friday"]})]
        ),
        ToolCalls([Call("book", lambda r: {"day": r["ask_person"]["answer"]})]),
        Reply(_after),
    ],
)


def make_agent(store: Store, effects: Path) -> Agent:
    @capability(kind="execute", tier="auto")
    async def book(day: str, ctx: CallContext) -> dict[str, str]:
        """Book the table for a day."""
        with effects.open("a", encoding="utf-8") as f:
            f.write(f"{ctx.idempotency_key} {day}\n")
        return {"day": day}

    return Agent(
        model=ScriptedModel([SCRIPT]),
        capabilities=[ask_person(), book],
        store=store,
        authorize=allow_all,
        lease_seconds=2.0,  # a killed process's lease lapses soon (the sweep waits for it)
    )


class _KillAfter:
    """The store, with a SIGKILL right after its n-th commit (or create_run)."""

    def __init__(self, inner: Store, n: int) -> None:
        self._inner, self._n, self._writes = inner, n, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in ("commit", "create_run", "acquire", "release"):
            return attr

        async def trapped(*args: Any, **kwargs: Any) -> Any:
            result = await attr(*args, **kwargs)
            self._writes += 1
            if self._writes == self._n:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return trapped


async def open_store(database: str) -> Store:
    if database.startswith("postgresql://") or "dbname=" in database:  # a URL or a conninfo
        from fiduciary.stores.postgres import PostgresStore

        return await PostgresStore.open(database)
    from fiduciary.stores.sqlite import SQLiteStore

    return SQLiteStore(Path(database))


async def main(phase: str, database: str, effects: Path, arg: str | None) -> None:
    store = await open_store(database)
    try:
        if phase == "start" and arg is not None:
            store = _KillAfter(store, int(arg))
        agent = make_agent(store, effects)
        if phase in ("start", "whole"):
            events = await collect(agent.run("book a table", principal=PRINCIPAL))
            pending = [e for e in events if isinstance(e, PendingAction)]
            if phase == "start":
                (asked,) = pending
                print(f"WAITING {asked.run_id} {asked.approval_id}", flush=True)
                sys.stdin.read()  # killed here, the run awaiting input
                return
            (asked,) = pending
            await agent.answer(asked.approval_id, "Friday", by=PRINCIPAL)
            await collect(agent.resume(asked.run_id))
        elif phase == "answer":
            assert arg is not None
            await agent.answer(arg, "Friday", by=PRINCIPAL)  # type: ignore[arg-type]
            print("ANSWERED", flush=True)
        elif phase == "sweep":
            # a killed process's lease lapses after lease_seconds: resume until nothing is
            # left running (each pass resumes what can be; bounded by the test's timeout)
            while True:
                await agent.resume_all()
                runs = await store.list_runs(principal=PRINCIPAL)
                if all(r.status != "running" for r in runs):
                    break
                await asyncio.sleep(0.2)  # a lease the killed process held lapses meanwhile
        runs = await store.list_runs(principal=PRINCIPAL)
        print(json.dumps({str(r.run_id): r.status for r in runs}), flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    phase, database, effects = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    asyncio.run(main(phase, database, effects, sys.argv[4] if len(sys.argv) > 4 else None))
