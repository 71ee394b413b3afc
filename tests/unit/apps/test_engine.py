"""Lifecycle and ticks, on a manual clock."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from fiduciary import ManualClock, MemoryStore, RunError
from fiduciary.apps import TIER_SECONDS, MemoryAppTables, SQLiteAppTables

from .support import Book, Hooks, card, engine

WATCH = """---
id: watch
hooks: [init, tick, shutdown]
tier: active
capabilities: [balance]
sources: [price]
---
Watch the price.
"""

GUARDED = """---
id: guarded
hooks: [init, tick]
tier: standard
capabilities: [balance, buy]
permissions: [swap]
limits: {swap: 40}
---
Buy a little.
"""


def prices(value: list[str]) -> dict[str, Any]:
    async def price() -> str:
        return value[0]

    return {"price": price}


async def test_three_ticks_with_identical_sources_call_the_model_once() -> None:
    clock, book, hooks, price = ManualClock(), Book(), Hooks(), ["100"]
    hooks.on("watch", "init", lambda ctx: {"state": {"seen": 0}})
    hooks.on("watch", "tick", lambda ctx: {"state": {"seen": 1}, "reply": "ok"})
    hooks.on("watch", "init", lambda ctx: {"state": {"seen": 1}})
    eng = engine(WATCH, book=book, hooks=hooks, clock=clock, sources=prices(price))
    await eng.enable("watch")
    outcomes = []
    for _ in range(3):
        outcomes += [r.outcome for r in await eng.step()]
        clock.advance(30)
    assert outcomes == ["ran", "unchanged", "unchanged"]
    assert hooks.calls[("watch", "tick")] == 1
    record = await eng.record("watch")
    assert record.counters["skipped_unchanged"] == 2
    price[0] = "101"  # a changed source: the model is asked again
    assert [r.outcome for r in await eng.step()] == ["ran"]
    assert hooks.calls[("watch", "tick")] == 2


async def test_an_edit_between_ticks_is_read_back_and_changes_the_hash() -> None:
    clock, hooks = ManualClock(), Hooks()
    seen: list[dict[str, Any]] = []
    hooks.on("watch", "init", lambda ctx: {"state": {"n": 1}})

    def tick(ctx: dict[str, Any]) -> dict[str, Any]:
        seen.append(ctx["state"])
        return {}

    hooks.on("watch", "tick", tick)
    eng = engine(WATCH, book=Book(), hooks=hooks, clock=clock, sources=prices(["1"]))
    await eng.enable("watch")
    await eng.step()
    clock.advance(30)
    await eng.set_state("watch", {"n": 7})
    await eng.step()
    assert seen == [{"n": 1}, {"n": 7}]


async def test_a_slot_runs_once_across_engines_sharing_a_database(tmp_path: Any) -> None:
    clock, hooks, store = ManualClock(), Hooks(), MemoryStore()
    hooks.on("watch", "tick", lambda ctx: {})
    hooks.on("watch", "init", lambda ctx: {})
    path = tmp_path / "apps.db"
    one = engine(
        WATCH,
        book=Book(),
        hooks=hooks,
        clock=clock,
        store=store,
        tables=SQLiteAppTables(path),
        sources=prices(["1"]),
    )
    two = engine(
        WATCH,
        book=Book(),
        hooks=hooks,
        clock=clock,
        store=store,
        tables=SQLiteAppTables(path),
        sources=prices(["1"]),
    )
    await one.enable("watch")
    results = await asyncio.gather(one.tick("watch"), two.tick("watch"))
    assert sorted(r.outcome for r in results) == ["ran", "taken"]
    assert hooks.calls[("watch", "tick")] == 1


async def test_a_tick_still_running_makes_the_next_one_skipped() -> None:
    clock, hooks = ManualClock(), Hooks()
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_price() -> str:
        entered.set()
        await release.wait()
        return "1"

    hooks.on("watch", "init", lambda ctx: {})
    hooks.on("watch", "tick", lambda ctx: {})
    eng = engine(WATCH, book=Book(), hooks=hooks, clock=clock, sources={"price": slow_price})
    await eng.enable("watch")
    first = asyncio.create_task(eng.step())
    await entered.wait()
    clock.advance(30)
    second = await eng.step()
    assert [r.outcome for r in second] == ["busy"]
    release.set()
    assert [r.outcome for r in await first] == ["ran"]
    record = await eng.record("watch")
    assert record.counters["skipped_busy"] == 1
    ticks = await eng.tables.ticks("watch")
    assert sorted(t.outcome for t in ticks) == ["busy", "ran"]


async def test_enabling_an_app_with_permissions_waits_for_a_person() -> None:
    clock, hooks = ManualClock(), Hooks()
    hooks.on("guarded", "init", lambda ctx: {"state": {"ready": True}})
    eng = engine(GUARDED, book=Book(), hooks=hooks, clock=clock)
    record = await eng.enable("guarded")
    assert not record.enabled
    assert ("guarded", "init") not in hooks.calls
    [pending] = await eng.pending("guarded")
    assert pending.args["permissions"] == ["swap"]
    assert pending.args["limits_usd"] == {"swap": "40"}
    assert pending.args["capabilities"] == ["balance", "buy"]
    assert "limits swap up to $40" in (await card(eng, pending)).description
    await eng.approve(pending.approval_id, by="alice")
    await eng.step()
    record = await eng.record("guarded")
    assert record.enabled
    assert record.approved_mode == "paper"
    assert record.state == {"ready": True}
    assert hooks.calls[("guarded", "init")] == 1


async def test_a_denied_enable_leaves_the_app_disabled() -> None:
    clock, hooks = ManualClock(), Hooks()
    eng = engine(GUARDED, book=Book(), hooks=hooks, clock=clock)
    await eng.enable("guarded")
    [pending] = await eng.pending("guarded")
    await eng.deny(pending.approval_id, by="alice")
    record = await eng.enable("guarded")
    assert not record.enabled
    assert [e.kind for e in await eng.tables.read_log("guarded")] == ["enable_refused"]


async def test_disable_runs_shutdown_and_persists_the_state() -> None:
    clock, hooks = ManualClock(), Hooks()
    hooks.on("watch", "init", lambda ctx: {"state": {"n": 1}})
    hooks.on("watch", "shutdown", lambda ctx: {"state": {"n": 1, "closed": True}})
    eng = engine(WATCH, book=Book(), hooks=hooks, clock=clock, sources=prices(["1"]))
    await eng.enable("watch")
    record = await eng.disable("watch")
    assert not record.enabled
    assert (await eng.record("watch")).state == {"n": 1, "closed": True}
    assert await eng.step() == []  # a disabled app does not tick


@pytest.mark.parametrize(
    ("policy", "calls", "paused"), [("skip", 1, False), ("retry", 2, False), ("pause", 1, True)]
)
async def test_source_failure_policies(policy: str, calls: int, paused: bool) -> None:
    clock, hooks = ManualClock(), Hooks()
    attempts: list[int] = []

    async def broken() -> str:
        attempts.append(1)
        raise ConnectionError("down")

    hooks.on("watch", "tick", lambda ctx: {})
    text = WATCH.replace(
        "sources: [price]", f"sources: [price]\nconfig:\n  errors: {{sourceFail: {policy}}}"
    )
    eng = engine(text, book=Book(), hooks=hooks, clock=clock, sources={"price": broken})
    await eng.enable("watch")
    [result] = await eng.step()
    assert result.outcome == "error"
    assert len(attempts) == calls
    record = await eng.record("watch")
    assert (record.paused_until is not None) is paused
    clock.advance(30)
    [after] = await eng.step()
    assert after.outcome == ("paused" if paused else "error")


async def test_three_consecutive_errors_pause_the_app_for_the_cooldown() -> None:
    clock, hooks = ManualClock(), Hooks()

    async def broken() -> str:
        raise ConnectionError("down")

    eng = engine(
        WATCH,
        book=Book(),
        hooks=hooks,
        clock=clock,
        sources={"price": broken},
        cooldown_seconds=120,
    )
    await eng.enable("watch")
    outcomes = []
    for _ in range(5):
        outcomes += [r.outcome for r in await eng.step()]
        clock.advance(30)
    assert outcomes == ["error", "error", "error", "paused", "paused"]
    clock.advance(120)
    assert [r.outcome for r in await eng.step()] == ["error"]  # the cooldown is over


async def test_a_hook_answer_that_is_not_structured_is_an_error() -> None:
    clock, hooks = ManualClock(), Hooks()
    hooks.on("watch", "tick", lambda ctx: {"unexpected": 1})
    eng = engine(WATCH, book=Book(), hooks=hooks, clock=clock, sources=prices(["1"]))
    await eng.enable("watch")
    [result] = await eng.step()
    assert result.outcome == "error"
    assert "unknown keys: unexpected" in result.detail


async def test_a_live_app_needs_a_live_backend_and_an_approval_that_said_live() -> None:
    clock, hooks, paper, live = ManualClock(), Hooks(), Book(), Book()
    hooks.on(
        "guarded",
        "tick",
        lambda ctx: {
            "intents": [
                {
                    "summary": "buy",
                    "action": {"capability": "buy", "args": {"asset": "ETH", "usd": "5"}},
                }
            ]
        },
    )
    text = GUARDED.replace(
        "limits: {swap: 40}", "limits: {swap: 40}\nconfig: {mode: live, approve: false}"
    )
    eng = engine(text, book=paper, hooks=hooks, clock=clock)
    with pytest.raises(RunError, match="no live backend is registered"):
        await eng.enable("guarded")
    eng.live = {c.name: c for c in live.capabilities()}
    await eng.enable("guarded")
    [pending] = await eng.pending("guarded")
    assert pending.args["mode"] == "live"
    assert "(live)" in (await card(eng, pending)).description
    await eng.approve(pending.approval_id, by="alice")
    await eng.enable("guarded")
    [result] = await eng.step()
    assert result.outcome == "ran"
    assert live.calls == [("buy", {"asset": "ETH", "usd": "5"})]
    assert paper.calls == []


async def test_an_app_enabled_on_paper_never_ticks_live() -> None:
    clock, hooks, paper, live = ManualClock(), Hooks(), Book(), Book()
    eng = engine(GUARDED, book=paper, hooks=hooks, clock=clock)
    eng.live = {c.name: c for c in live.capabilities()}
    await eng.enable("guarded")
    [pending] = await eng.pending("guarded")
    await eng.approve(pending.approval_id, by="alice")
    await eng.enable("guarded")
    m = eng.manifests["guarded"]
    eng.manifests["guarded"] = dataclasses.replace(
        m, config=dataclasses.replace(m.config, mode="live")
    )
    [result] = await eng.step()  # the approval said paper: refused, never live
    assert result.outcome == "error"
    assert "an enabling approval that said live" in result.detail


async def test_tick_ids_derive_from_the_app_and_the_slot() -> None:
    clock, hooks = ManualClock(), Hooks()
    hooks.on("watch", "tick", lambda ctx: {})
    a = engine(WATCH, book=Book(), hooks=hooks, clock=clock, sources=prices(["1"]))
    b = engine(
        WATCH,
        book=Book(),
        hooks=hooks,
        clock=clock,
        sources=prices(["1"]),
        tables=MemoryAppTables(),
    )
    await a.enable("watch")
    await b.enable("watch")
    ra, rb = await a.tick("watch"), await b.tick("watch")
    assert ra.run_id == rb.run_id is not None  # one slot, two engines: one id
    clock.advance(TIER_SECONDS["active"])  # the next slot: another id, the same on both
    na, nb = await a.tick("watch"), await b.tick("watch")
    assert na.slot != ra.slot
    assert na.run_id == nb.run_id is not None
    assert na.run_id != ra.run_id


CHAT = """---
id: chat
hooks: [message]
capabilities: [balance]
---
Answer questions.
"""


async def test_a_message_is_a_run_whose_structured_reply_comes_back() -> None:
    clock, hooks = ManualClock(), Hooks()
    hooks.on(
        "chat",
        "message",
        lambda ctx: {"reply": f"you said {ctx['message']}", "state": {"last": ctx["message"]}},
    )
    eng = engine(CHAT, book=Book(), hooks=hooks, clock=clock)
    await eng.enable("chat")
    answer = await eng.message("chat", "hello")
    assert answer.reply == "you said hello"
    assert (await eng.record("chat")).state == {"last": "hello"}
    run = await eng.store.get_run(answer.run_id)
    assert run is not None
    assert run.status == "completed"


async def test_messages_are_limited_to_ten_a_minute_per_app() -> None:
    clock, hooks = ManualClock(), Hooks()
    hooks.on("chat", "message", lambda ctx: {"reply": "ok"})
    eng = engine(CHAT, book=Book(), hooks=hooks, clock=clock)
    await eng.enable("chat")
    for _ in range(10):
        await eng.message("chat", "hi")
    with pytest.raises(RunError, match="at most 10 messages a minute"):
        await eng.message("chat", "hi")
    clock.advance(60)
    assert (await eng.message("chat", "hi")).reply == "ok"


async def test_start_enables_auto_start_and_message_apps_and_waits_for_approvals() -> None:
    clock, hooks = ManualClock(), Hooks()
    auto = WATCH.replace("tier: active", "tier: active\nautoStart: true")
    guarded = GUARDED.replace("tier: standard", "tier: standard\nautoStart: true")
    plain = CHAT.replace("id: chat", "id: plain").replace("hooks: [message]", "hooks: [tick]")
    eng = engine(
        auto, guarded, CHAT, plain, book=Book(), hooks=hooks, clock=clock, sources=prices(["1"])
    )
    started = {r.app_id: r.enabled for r in await eng.start()}
    assert started == {"chat": True, "guarded": False, "watch": True}
    assert [a.capability for a in await eng.pending("guarded")] == ["app_enable"]
    assert not (await eng.record("plain")).enabled
