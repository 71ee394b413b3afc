"""The one inbound path: its rate limit on a manual clock, serial per target, parallel across."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from fiduciary import ManualClock, Principal
from fiduciary.channels import AgentChat, ChannelError, Inbox, RateLimitError, Reply
from fiduciary.events import Origin
from fiduciary.stores.memory import MemoryStore

from . import chat_agent


class Recorder:
    """A target that records what reached it; ``gate`` holds it until the test opens it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self.inside = 0
        self.most_inside = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()

    async def __call__(self, principal: Principal, text: str, channel: str) -> str:
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        self.entered.set()
        try:
            await self.gate.wait()
            self.seen.append((principal.actor_id, text, channel))
            return f"ok: {text}"
        finally:
            self.inside -= 1


async def test_ten_messages_a_minute_per_target_on_the_clock() -> None:
    clock = ManualClock()
    inbox = Inbox(clock=clock)
    app = Recorder()
    inbox.add("dca", app)
    for i in range(10):
        reply = await inbox.deliver("dca", principal="alice", text=f"m{i}", channel="console")
        assert reply == Reply(f"ok: m{i}")
    with pytest.raises(RateLimitError) as refused:  # the 11th, from anyone, on any channel
        await inbox.deliver("dca", principal="bob", text="m10", channel="telegram")
    assert refused.value.retry_after == 60
    assert refused.value.message == "too many messages: try again in 60 s"
    assert len(app.seen) == 10
    clock.advance(59)
    with pytest.raises(RateLimitError):
        await inbox.deliver("dca", principal="alice", text="m11", channel="webhook")
    clock.advance(1)  # the first message leaves the window
    assert (await inbox.deliver("dca", principal="alice", text="m12", channel="webhook")).text
    assert app.seen[-1] == ("alice", "m12", "webhook")


async def test_each_principal_has_its_own_limit_on_a_per_principal_target() -> None:
    inbox = Inbox(clock=ManualClock(), limit=2)
    chat = Recorder()
    inbox.add("chat", chat, per="principal")
    for _ in range(2):
        await inbox.deliver("chat", principal="alice", text="hi", channel="console")
    with pytest.raises(RateLimitError):
        await inbox.deliver("chat", principal="alice", text="hi", channel="console")
    await inbox.deliver("chat", principal="bob", text="hi", channel="console")
    assert [who for who, _, _ in chat.seen] == ["alice", "alice", "bob"]


async def test_serial_per_target_and_parallel_across_targets() -> None:
    inbox = Inbox(clock=ManualClock())
    first, second = Recorder(), Recorder()
    inbox.add("first", first)
    inbox.add("second", second)
    first.gate.clear()
    async with asyncio.timeout(10):
        a = asyncio.create_task(inbox.deliver("first", principal="p", text="1", channel="c"))
        b = asyncio.create_task(inbox.deliver("first", principal="q", text="2", channel="c"))
        await first.entered.wait()
        # the other target answers while "first" is held
        assert (await inbox.deliver("second", principal="p", text="x", channel="c")).text
        assert first.inside == 1
        assert first.seen == []
        first.gate.set()
        await asyncio.gather(a, b)
    assert first.most_inside == 1
    assert [text for _, text, _ in first.seen] == ["1", "2"]


async def test_unknown_targets_and_empty_text_are_refused_before_counting() -> None:
    inbox = Inbox(clock=ManualClock(), limit=1)
    app = Recorder()
    inbox.add("app", app)
    with pytest.raises(ChannelError) as unknown:
        await inbox.deliver("nope", principal="alice", text="hi", channel="console")
    assert unknown.value.code == "unknown_target"
    with pytest.raises(ChannelError) as empty:
        await inbox.deliver("app", principal="alice", text="  ", channel="console")
    assert empty.value.code == "invalid"
    assert (await inbox.deliver("app", principal="alice", text="hi", channel="c")).text
    with pytest.raises(ValueError, match="already registered"):
        inbox.add("app", app)


async def test_a_plain_agent_continues_the_principals_chat() -> None:
    agent = chat_agent.factory(MemoryStore())
    inbox = Inbox(clock=ManualClock())
    chat = AgentChat(agent)
    inbox.add("chat", chat, per="principal")
    one = await inbox.deliver("chat", principal="alice", text="hello", channel="console")
    two = await inbox.deliver("chat", principal="alice", text="again", channel="webhook")
    other = await inbox.deliver("chat", principal="bob", text="hey", channel="telegram")
    assert (one.text, two.text, other.text) == (
        "you said: hello",
        "you said: again",
        "you said: hey",
    )
    runs = await agent.list_runs()
    assert sorted(r.run_id for r in runs) == sorted(
        {chat.run_id(Principal("alice")), chat.run_id(Principal("bob"))}
    )


async def test_a_chat_waiting_for_a_decision_says_so() -> None:
    agent = chat_agent.factory(MemoryStore())
    chat = AgentChat(agent)
    first = await chat(Principal("alice"), "pay bob 50", "console")
    assert first.text == ""
    (pending,) = first.pending
    assert pending.capability == "send"
    second = await chat(Principal("alice"), "and?", "console")
    assert second.text.startswith("I am waiting for your decision")
    assert [p.approval_id for p in second.pending] == [pending.approval_id]


async def test_each_turn_of_the_reply_is_its_own_paragraph() -> None:
    chat = AgentChat(chat_agent.factory(MemoryStore()))
    reply = await chat(Principal("alice"), "balance", "console")
    assert reply == Reply("Let me look.\n\nYou have $5000.00.")


async def test_a_webhook_or_a_group_is_not_the_principal_in_person() -> None:
    agent = chat_agent.factory(MemoryStore())
    inbox = Inbox(clock=ManualClock())
    inbox.add("chat", AgentChat(agent), per="principal")
    sent = len(chat_agent.SENT)
    # $5 of "send" runs on its own for the principal in person (the console, their own chat)
    mine = await inbox.deliver("chat", principal="ann", text="pay bob 5", channel="console")
    assert (mine.text, mine.pending) == ("sent", ())
    assert len(chat_agent.SENT) == sent + 1
    for who, channel in (("ben", "webhook"), ("cat", "telegram:group")):
        outside = await inbox.deliver("chat", principal=who, text="pay bob 5", channel=channel)
        (pending,) = outside.pending
        assert (pending.capability, pending.tier) == ("send", "confirm")
    assert len(chat_agent.SENT) == sent + 1


async def test_a_chat_may_grant_a_channel_an_autonomous_budget() -> None:
    agent = chat_agent.factory(MemoryStore())
    budget = Origin(source="webhook:bank", budget={"send": Decimal("5")})
    chat = AgentChat(agent, budgets={"webhook": budget})
    sent = len(chat_agent.SENT)
    within = await chat(Principal("dan"), "pay bob 5", "webhook")
    assert (within.text, within.pending) == ("sent", ())
    beyond = await chat(Principal("eve"), "pay bob 6", "webhook")  # "auto" for eve in person
    assert len(beyond.pending) == 1
    assert len(chat_agent.SENT) == sent + 1
