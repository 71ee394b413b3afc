"""The sync API: run_sync and friends, in a plain script and under a running event loop."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import pytest

from fiduciary import (
    Agent,
    ApprovalError,
    RunError,
    RunResult,
    SQLiteStore,
    approve_sync,
    call_sync,
    capability,
    deny_sync,
    resume_sync,
    run_sync,
)
from fiduciary.events import TextDelta, TurnRetracted
from fiduciary.stores.base import Store
from fiduciary.testing import Call, MemoryStore, Reply, Script, ScriptedModel, ToolCalls
from tests.agent_support import make_agent

from .conftest import Effects


def sending_agent(store: Store, effects: Effects) -> Agent:
    model = ScriptedModel(
        [
            Script(
                "send 60",
                [
                    ToolCalls([Call("send", {"to": "bob", "amount": "60"})]),
                    Reply(lambda r: "Sent." if "send" in r else "Not sent."),
                ],
            ),
            Script("hello", [Reply("Hello there.", chunk_chars=4)]),
        ]
    )
    return make_agent(effects, store, model=model)


def approve_and_finish(agent: Agent, effects: Effects) -> None:
    first = run_sync(agent, "send 60 to bob", principal="alice")
    assert first.status == "awaiting_approval"
    assert [e.type for e in first.events][-1] == "pending_action"
    (card,) = first.pending
    assert card.name == "send"
    assert effects.payments == []
    record = approve_sync(agent, card, by="alice")
    assert record.status == "approved"
    assert record.decided_by == "alice"
    done = resume_sync(agent, first.run_id)
    assert done.run_id == first.run_id
    assert done.status == "completed"
    assert done.pending == ()
    assert done.text == "Sent."
    assert [p["amount"] for p in effects.payments] == [60]


def test_a_script_runs_approves_and_resumes(tmp_path: Path) -> None:
    effects = Effects()
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    agent = sending_agent(store, effects)
    approve_and_finish(agent, effects)
    call_sync(store.close())


async def test_it_works_where_an_event_loop_is_already_running() -> None:
    """As in Jupyter: the calling thread runs a loop, where asyncio.run would refuse."""
    effects = Effects()
    approve_and_finish(sending_agent(MemoryStore(), effects), effects)


async def test_every_call_runs_on_one_loop_of_its_own() -> None:
    async def current() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    theirs = call_sync(current())
    assert theirs is call_sync(current())
    assert theirs is not asyncio.get_running_loop()


def test_a_denied_action_never_runs() -> None:
    effects = Effects()
    agent = sending_agent(MemoryStore(), effects)
    first = run_sync(agent, "send 60 to bob", principal="alice")
    record = deny_sync(agent, first.pending[0], by="alice", reason="not today")
    assert record.status == "denied"
    done = resume_sync(agent, first.run_id)
    assert done.status == "completed"
    assert done.text == "Not sent."
    assert effects.payments == []


def test_approving_a_card_binds_to_the_arguments_it_showed() -> None:
    effects = Effects()
    agent = sending_agent(MemoryStore(), effects)
    first = run_sync(agent, "send 60 to bob", principal="alice")
    stale = first.pending[0].model_copy(update={"args_digest": "0" * 64})
    with pytest.raises(ApprovalError) as refused:
        approve_sync(agent, stale, by="alice")
    assert refused.value.code == "digest_mismatch"
    approve_sync(agent, first.pending[0].approval_id, by="alice")  # by id, as agent.approve
    assert resume_sync(agent, first.run_id).status == "completed"


def test_a_run_without_approvals_completes_in_one_call() -> None:
    result = run_sync(sending_agent(MemoryStore(), Effects()), "hello", principal="alice")
    assert result.status == "completed"
    assert result.text == "Hello there."
    assert result.pending == ()
    assert result.events[0].type == "run_started"


def test_errors_reach_the_caller() -> None:
    agent = sending_agent(MemoryStore(), Effects())
    with pytest.raises(RunError) as invalid:
        run_sync(agent, "  ", principal="alice")
    assert invalid.value.code == "invalid"
    with pytest.raises(RunError) as missing:
        resume_sync(agent, uuid4())
    assert missing.value.code == "not_found"


def test_a_timeout_of_the_call_itself_is_raised_not_waited_on() -> None:
    async def times_out() -> None:
        raise TimeoutError("the backend did not answer")

    with pytest.raises(TimeoutError, match="did not answer"):
        call_sync(times_out())


def test_a_sync_call_on_its_own_loop_is_refused_not_a_deadlock() -> None:
    async def inner() -> None:
        return None

    async def outer() -> None:
        call_sync(inner())

    with pytest.raises(RunError) as refused:
        call_sync(outer())
    assert refused.value.code == "state"
    assert "await the async API" in refused.value.message


def interrupt_once_waiting(started: threading.Event) -> None:
    """Ctrl-C, as a person presses it: SIGINT to the main thread, once ``started`` is set and
    the main thread waits for the call (it has handed it over)."""
    if os.name != "posix" or threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT is sent to the main thread, on POSIX")
    main = threading.main_thread().ident or 0

    def waiting() -> bool:
        frame = sys._current_frames().get(main)
        while frame is not None:
            if frame.f_code.co_name == "wait" and "concurrent" in frame.f_code.co_filename:
                return True
            frame = frame.f_back
        return False

    def interrupt() -> None:
        started.wait()
        while not waiting():
            threading.Event().wait(0.001)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()


def test_an_interrupted_call_is_stopped_before_the_interrupt_returns() -> None:
    started, stopped = threading.Event(), threading.Event()

    async def forever() -> None:
        try:
            started.set()
            await asyncio.Event().wait()
        finally:
            stopped.set()

    interrupt_once_waiting(started)
    with pytest.raises(KeyboardInterrupt):
        call_sync(forever())
    assert stopped.is_set()


def test_an_interrupted_run_is_released_and_resumes() -> None:
    started, calls = threading.Event(), []

    @capability(kind="read")
    async def slow_lookup() -> str:
        """A lookup that hangs the first time."""
        calls.append(1)
        if len(calls) == 1:
            started.set()
            await asyncio.Event().wait()
        return "found"

    model = ScriptedModel(
        [Script("look", [ToolCalls([Call("slow_lookup")]), Reply(lambda r: r["slow_lookup"])])]
    )
    agent = Agent(model=model, capabilities=[slow_lookup], store=MemoryStore())
    run_id = uuid4()
    interrupt_once_waiting(started)
    with pytest.raises(KeyboardInterrupt):
        run_sync(agent, "look it up", principal="alice", run_id=run_id)
    run = call_sync(agent.get_run(run_id))
    assert run.status == "running"
    assert run.lease_owner is None  # released when interrupted: resumable at once
    done = resume_sync(agent, run_id)
    assert done.status == "completed"
    assert done.text == "found"
    assert len(calls) == 2


def test_text_leaves_out_a_retracted_turn() -> None:
    run_id, at = uuid4(), datetime(2026, 1, 1, tzinfo=UTC)
    result = RunResult(
        run_id=run_id,
        status="completed",
        events=(
            TextDelta(run_id=run_id, seq=3, at=at, text="lost "),
            TextDelta(run_id=run_id, seq=4, at=at, text="half"),
            TurnRetracted(run_id=run_id, seq=5, at=at, from_seq=3),
            TextDelta(run_id=run_id, seq=6, at=at, text="Done."),
        ),
        pending=(),
    )
    assert result.text == "Done."
