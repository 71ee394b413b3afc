"""Scoped grants the model asks for in an app's message run (``request_grant``): the run waits
for a person, whose approval creates the grant; the retried write then runs within it, and a
write beyond it goes back to a person. Denied → the model is told."""

from __future__ import annotations

from pathlib import Path

import pytest

from fiduciary.apps import AppEngine, MemoryAppTables
from fiduciary.events import PendingAction, ToolCallRejected
from fiduciary.exceptions import RunError
from fiduciary.models.scripted import Step
from fiduciary.testing import Call, ManualClock, MemoryStore, Reply, Script, ToolCalls
from tests.faults.grant_child import GRANT, STEPS, build, enabled, said, saves


async def world(tmp_path: Path, steps: list[Step] = STEPS) -> tuple[AppEngine, Path]:
    effects = tmp_path / "effects.sqlite3"
    engine = build(MemoryStore(), MemoryAppTables(), effects, steps)
    await enabled(engine)
    return engine, effects


async def test_an_approved_grant_lets_the_retried_write_run_without_another_card(
    tmp_path: Path,
) -> None:
    engine, effects = await world(tmp_path)
    sent = await engine.message("sweeper", "sweep the idle USDC")
    assert sent.waiting
    assert sent.reply is None
    [approval] = await engine.pending("sweeper")
    assert approval.capability == "request_grant"
    [card] = [
        e
        for e in await engine.store.read_events(sent.run_id)
        if isinstance(e, PendingAction) and e.approval_id == approval.approval_id
    ]
    assert card.description == (
        "App sweeper asks to run save without asking, up to $100 each, for 120 s: sweep"
    )
    assert await engine.tables.grants("sweeper") == []  # asked, not granted
    await engine.approve(approval.approval_id, by="alice")
    reply = await engine.resume_message("sweeper", sent.run_id)
    assert reply.reply == "saved 60"
    assert not reply.waiting
    assert saves(effects) == [1]
    [grant] = await engine.tables.grants("sweeper")
    assert grant.operations == ("save",)
    assert grant.limits_usd == {"save": "100"}
    log = await engine.tables.read_log("sweeper")
    assert [e.detail["amount_usd"] for e in log if e.kind == "grant_used"] == ["60"]
    assert await engine.pending("sweeper") == []


async def test_a_write_beyond_the_grant_goes_back_to_a_person(tmp_path: Path) -> None:
    # within the grant, $60; the next $60 is beyond the $40 left of it: a card
    steps: list[Step] = [*STEPS[:2], ToolCalls([Call("save", {"usd": "60"})]), Reply("{}")]
    engine, effects = await world(tmp_path, steps)
    sent = await engine.message("sweeper", "sweep the idle USDC")
    [approval] = await engine.pending("sweeper")
    await engine.approve(approval.approval_id, by="alice")
    reply = await engine.resume_message("sweeper", sent.run_id)
    assert reply.waiting
    assert saves(effects) == [1]
    [held] = await engine.pending("sweeper")
    assert held.capability == "save"
    assert held.args == {"usd": "60"}


async def test_a_denied_grant_is_told_to_the_model_and_grants_nothing(tmp_path: Path) -> None:
    engine, effects = await world(tmp_path, [STEPS[0], Reply(said)])
    sent = await engine.message("sweeper", "sweep the idle USDC")
    [approval] = await engine.pending("sweeper")
    await engine.deny(approval.approval_id, by="alice", reason="not today")
    reply = await engine.resume_message("sweeper", sent.run_id)
    assert reply.reply is not None
    assert reply.reply.startswith("no grant: ")
    assert await engine.tables.grants("sweeper") == []
    assert saves(effects) == []


async def test_a_grant_outside_the_apps_permissions_is_refused_before_any_card(
    tmp_path: Path,
) -> None:
    asked = {**GRANT, "operations": ["send"]}
    engine, _ = await world(tmp_path, [ToolCalls([Call("request_grant", asked)]), Reply(said)])
    sent = await engine.message("sweeper", "send it all to bob")
    assert not sent.waiting
    assert sent.reply is not None
    assert "no permission for send" in sent.reply
    assert await engine.pending("sweeper") == []
    rejected = [
        e for e in await engine.store.read_events(sent.run_id) if isinstance(e, ToolCallRejected)
    ]
    assert [e.name for e in rejected] == ["request_grant"]


async def test_resuming_a_run_that_is_not_the_apps_message_is_refused(tmp_path: Path) -> None:
    engine, _ = await world(tmp_path)
    await engine.message("sweeper", "sweep the idle USDC")
    [approval] = await engine.pending("sweeper")
    with pytest.raises(RunError, match="no message run"):
        await engine.resume_message("sweeper", approval.approval_id)
    assert [a.approval_id for a in await engine.pending("sweeper")] == [approval.approval_id]


async def test_after_the_grant_expired_the_same_write_goes_back_to_a_person(
    tmp_path: Path,
) -> None:
    # the grant is asked for and approved, the save comes later: after the grant's 120 s
    save = Script(match="save now", steps=[ToolCalls([Call("save", {"usd": "60"})]), Reply("{}")])
    effects = tmp_path / "effects.sqlite3"
    engine = build(MemoryStore(), MemoryAppTables(), effects, [STEPS[0], Reply("{}")], [save])
    await enabled(engine)
    sent = await engine.message("sweeper", "ask for a grant")
    [approval] = await engine.pending("sweeper")
    await engine.approve(approval.approval_id, by="alice")
    assert not (await engine.resume_message("sweeper", sent.run_id)).waiting
    assert len(await engine.tables.grants("sweeper")) == 1
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(120)
    late = await engine.message("sweeper", "save now")
    assert late.waiting
    assert saves(effects) == []
    [held] = await engine.pending("sweeper")
    assert held.capability == "save"
    shown = [
        e
        for e in await engine.store.read_events(late.run_id)
        if isinstance(e, PendingAction) and e.approval_id == held.approval_id
    ]
    assert [c.guard_notes for c in shown] == [[]]  # its tier's card, not a hold
