"""A tick is an outside event: nobody asked for its intents, so a write waits for a person
unless the app's autonomous budget (its permissions, approved when it was enabled, up to its
limits) allows it."""

from __future__ import annotations

from decimal import Decimal

from fiduciary import ManualClock
from fiduciary.events import RunStarted, UserMessage

from .support import Book, Hooks, engine

BARE = """---
id: saver
hooks: [tick]
tier: standard
capabilities: [balance, save]
config: {approve: false}
---
Save.
"""
PERMITTED = BARE.replace(
    "capabilities: [balance, save]",
    "capabilities: [balance, save]\npermissions: [save]\nlimits: {save: 3}",
)


def save(usd: str) -> dict[str, object]:
    return {"summary": f"save ${usd}", "action": {"capability": "save", "args": {"usd": usd}}}


async def test_an_app_without_a_budget_never_moves_money_on_its_own() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    hooks.on("saver", "tick", lambda ctx: {"intents": [save("1")]})
    eng = engine(BARE, book=book, hooks=hooks, clock=clock)
    await eng.enable("saver")  # no permissions: enabled without a card
    [result] = await eng.step()
    assert result.outcome == "waiting"
    assert book.calls == []  # $1 is "auto" by the preset, but nobody asked for it
    [approval] = await eng.pending("saver")
    assert approval.capability == "save"
    events = await eng.store.read_events(approval.run_id)
    started, message = events[0], events[1]
    assert isinstance(started, RunStarted)
    assert isinstance(message, UserMessage)
    assert started.origin is not None
    assert started.origin.source == "app:saver"
    assert message.origin == started.origin


async def test_an_app_runs_on_its_own_within_the_budget_a_person_enabled_and_no_further() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    hooks.on("saver", "tick", lambda ctx: {"intents": [save("2"), save("4")]})
    eng = engine(PERMITTED, book=book, hooks=hooks, clock=clock)
    await eng.enable("saver")
    for approval in await eng.pending("saver"):  # the enabling card shows the budget
        await eng.approve(approval.approval_id, by="alice")
    await eng.enable("saver")
    await eng.step()
    assert book.calls == [("save", {"usd": "2"})]


CHAT = """---
id: chat
hooks: [message]
tier: standard
capabilities: [balance, save]
permissions: [save]
limits: {save: 3}
---
Answer questions.
"""


async def test_a_message_from_a_webhook_is_an_outside_event_with_the_apps_budget() -> None:
    clock, hooks = ManualClock(), Hooks()
    hooks.on("chat", "message", lambda ctx: {"reply": "ok"})
    eng = engine(CHAT, book=Book(), hooks=hooks, clock=clock)
    await eng.enable("chat")
    for approval in await eng.pending("chat"):  # the enabling approval
        await eng.approve(approval.approval_id, by="alice")
    await eng.enable("chat")
    signed = await eng.message("chat", "hello", channel="webhook")
    started = (await eng.store.read_events(signed.run_id))[0]
    assert isinstance(started, RunStarted)
    assert started.origin is not None
    assert started.origin.source == "app:chat:webhook"
    assert started.origin.budget == {"save": Decimal("3")}
    console = await eng.message("chat", "hello", channel="console")
    started = (await eng.store.read_events(console.run_id))[0]
    assert isinstance(started, RunStarted)
    assert started.origin is None  # the person in the console
