"""``ask_person``: the model asks the person mid-run; the run waits ``awaiting_input``."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from fiduciary import (
    ActionResolved,
    Agent,
    ApprovalError,
    PendingAction,
    Principal,
    RunCompleted,
    RunFailed,
    ToolCallEnd,
    ToolCallRejected,
    ask_person,
)
from fiduciary.events import Event
from fiduciary.stores.base import Store
from fiduciary.testing import (
    Call,
    ManualClock,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    collect,
)


def _reply(results: Any) -> str:
    if "ask_person" in results:
        return f"You chose {results['ask_person']['answer']}."
    return f"No answer: {results.errors.get('ask_person', '')[:60]}"


SCRIPT = Script(
    "colour",
    [
        ToolCalls([Call("ask_person", {"question": "Which colour?", "choices": ["red", "blue"]})]),
        Reply(_reply),
    ],
)


def make(store: Store, clock: ManualClock, **kw: Any) -> Agent:
    return Agent(
        model=ScriptedModel([SCRIPT]),
        capabilities=[ask_person()],
        store=store,
        clock=clock,
        **kw,
    )


async def _asked(agent: Agent) -> tuple[list[Event], PendingAction]:
    events = await collect(agent.run("pick a colour", principal="alice"))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    return events, pending


async def test_the_run_waits_for_the_answer_and_resumes_with_it(
    store: Store, clock: ManualClock
) -> None:
    agent = make(store, clock)
    events, pending = await _asked(agent)
    run_id = events[0].run_id
    assert pending.executor == "person"
    assert pending.name == "ask_person"
    assert pending.input == {"question": "Which colour?", "choices": ["red", "blue"]}
    assert (await agent.get_run(run_id)).status == "awaiting_input"
    (question,) = await agent.questions(principal="alice")
    assert question.question_id == pending.approval_id
    assert question.choices == ("red", "blue")
    assert question.status == "pending"
    assert await agent.questions(principal="bob") == []

    with pytest.raises(ApprovalError) as err:
        await agent.approve(pending.approval_id, by="alice")
    assert err.value.code == "question"
    with pytest.raises(ApprovalError) as err:
        await agent.answer(pending.approval_id, "blue", by="mallory")
    assert err.value.code == "forbidden"
    with pytest.raises(ApprovalError) as err:
        await agent.answer(pending.approval_id, "green", by="alice")
    assert err.value.code == "invalid_answer"
    assert (await agent.questions(principal="alice"))[0].status == "pending"  # nothing changed

    await agent.answer(pending.approval_id, "2", by="alice")  # a choice's number picks it
    with pytest.raises(ApprovalError) as err:
        await agent.answer(pending.approval_id, "red", by="alice")
    assert err.value.code == "already_decided"

    more = await collect(agent.resume(run_id))
    (resolved,) = [e for e in more if isinstance(e, ActionResolved)]
    assert resolved.decision == "client_result"
    assert resolved.by == "alice"
    (end,) = [e for e in more if isinstance(e, ToolCallEnd)]
    assert json.loads(end.output) == {"answer": "blue"}
    assert isinstance(more[-1], RunCompleted)
    assert more[-1].text == "You chose blue."
    audit = [(a.capability, a.outcome) for a in await store.audit_records(run_id)]
    assert audit == [("ask_person", "pending"), ("ask_person", "ok")]


async def test_an_unanswered_question_expires_and_the_model_is_told(
    store: Store, clock: ManualClock
) -> None:
    agent = make(store, clock)
    events, pending = await _asked(agent)
    run_id = events[0].run_id
    clock.advance(timedelta(seconds=agent.policy.approval_ttl_seconds + 1))
    with pytest.raises(ApprovalError) as err:
        await agent.answer(pending.approval_id, "red", by="alice")
    assert err.value.code == "expired"
    assert run_id in await agent.resume_all()
    stored = await store.read_events(run_id)
    (rejected,) = [e for e in stored if isinstance(e, ToolCallRejected)]
    assert rejected.reason == "expired"
    assert "No answer" in rejected.message
    assert isinstance(stored[-1], RunCompleted)
    assert stored[-1].text.startswith("No answer")
    audit = [a.outcome for a in await store.audit_records(run_id)]
    assert audit == ["pending", "rejected:expired"]


async def test_cancelling_closes_the_question_unanswered(store: Store, clock: ManualClock) -> None:
    agent = make(store, clock)
    events, pending = await _asked(agent)
    run_id = events[0].run_id
    await agent.cancel(run_id, by="alice", reason="never mind")
    assert (await agent.get_run(run_id)).status == "cancelled"
    stored = await store.read_events(run_id)
    assert isinstance(stored[-1], RunFailed)
    with pytest.raises(ApprovalError) as err:
        await agent.answer(pending.approval_id, "red", by="alice")
    assert err.value.code == "already_decided"
    assert await agent.questions(principal="alice") == []


async def test_a_free_answer_and_the_seeds_name(store: Store, clock: ManualClock) -> None:
    script = Script(
        "name",
        [
            ToolCalls([Call("request_human_action", {"question": "Your name?"})]),
            Reply(lambda r: f"Hello {r['request_human_action']['answer']}"),
        ],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[ask_person(name="request_human_action")],
        store=store,
        clock=clock,
    )
    events = await collect(agent.run("your name", principal="alice"))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    for bad in ("", "   ", "x" * 2001):
        with pytest.raises(ApprovalError) as err:
            await agent.answer(pending.approval_id, bad, by="alice")
        assert err.value.code == "invalid_answer"
    await agent.answer(pending.approval_id, " Ada ", by="alice")
    more = await collect(agent.resume(events[0].run_id))
    assert isinstance(more[-1], RunCompleted)
    assert more[-1].text == "Hello Ada"


async def test_an_admin_may_answer_and_unknown_ids_are_refused(
    store: Store, clock: ManualClock
) -> None:
    agent = make(store, clock)
    _, pending = await _asked(agent)
    for unknown in ("not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        with pytest.raises(ApprovalError) as err:
            await agent.answer(unknown, "red", by="alice")  # type: ignore[arg-type]
        assert err.value.code == "unknown"
    await agent.answer(pending.approval_id, "red", by=Principal("ops", frozenset({"admin"})))
    answered = await store.get_approval(pending.approval_id)
    assert answered is not None
    assert answered.decided_by == "ops"
