"""The Telegram channel against a local stand-in of the Bot API over HTTP."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from fiduciary import Agent, ManualClock, Principal
from fiduciary.channels import AgentChat, Inbox
from fiduciary.channels.links import Linked
from fiduciary.channels.records import ChannelRecords
from fiduciary.channels.split import utf16_length
from fiduciary.channels.telegram import (
    DECIDED,
    FAILED,
    NOT_VALID,
    STALE,
    TYPE_AMOUNT,
    TelegramChannel,
    TelegramError,
    channel_name,
)
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore

from . import chat_agent
from .botapi import BotApi, Sent
from .conftest import TOKEN

ALICE, BOB, STRANGER = 111, 222, 999


@dataclass
class World:
    api: BotApi
    url: str
    agent: Agent
    channel: TelegramChannel
    db: Path
    clock: ManualClock

    async def poll(self) -> int:
        return await self.channel.poll_once(wait_seconds=0)


async def _world(
    db: Path,
    api: BotApi,
    url: str,
    *,
    token: str = TOKEN,
    allow: dict[int, str] | None = None,
    groups: bool = False,
    linked: dict[str, int] | None = None,
    factory: Callable[[Store], Agent] = chat_agent.factory,
) -> tuple[World, SQLiteStore]:
    """A channel over ``db``; ``linked``: principal → the Telegram user linked for it (by
    default alice and bob, each the user of their private chat)."""
    store = await SQLiteStore.open(db)
    agent = factory(store)
    clock = ManualClock()
    inbox = Inbox(clock=clock)
    inbox.add("chat", AgentChat(agent, name="telegram"), per="principal")
    records = await ChannelRecords.open(channel_name(token), sqlite_path=str(db))
    channel = TelegramChannel(
        token=token,
        agent=agent,
        inbox=inbox,
        target="chat",
        allow={ALICE: "alice", BOB: "bob"} if allow is None else allow,
        records=records,
        groups=groups,
        api=url,
        poll_timeout=0,
        clock=clock,
    )
    for principal, user in ({"alice": ALICE, "bob": BOB} if linked is None else linked).items():
        code = await channel.links.issue(principal, now=clock.now())
        assert await channel.links.redeem(code, user, now=clock.now()) == Linked(principal, user)
    return World(api, url, agent, channel, db, clock), store


@pytest.fixture
async def world(tmp_path: Path, standin: tuple[BotApi, str]) -> AsyncIterator[World]:
    chat_agent.SENT.clear()
    made, store = await _world(tmp_path / "runs.sqlite3", *standin)
    await made.channel.start()
    try:
        yield made
    finally:
        await made.channel.close()
        await store.close()


def _data(card: Sent, verb: str) -> str:
    assert card.reply_markup is not None
    buttons = card.reply_markup["inline_keyboard"][0]
    wanted = {"a": "Approve", "d": "Deny"}[verb]
    return str(next(b["callback_data"] for b in buttons if b["text"] == wanted))


async def test_a_message_is_answered_in_its_chat(world: World) -> None:
    world.api.push_message(ALICE, "hello there")
    assert await world.poll() == 1
    assert world.api.texts(ALICE) == ["you said: hello there"]
    world.api.push_message(ALICE, "and again")
    await world.poll()
    assert world.api.texts(ALICE)[-1] == "you said: and again"
    runs = await world.agent.list_runs(principal="alice")
    assert len(runs) == 1  # the chat's one run, continued


async def test_a_pending_action_becomes_a_card_and_approve_executes_it(world: World) -> None:
    world.api.push_message(ALICE, "pay bob 50")
    await world.poll()
    (card,) = world.api.cards(ALICE)
    assert card.text.startswith("Approve send?")
    assert "Amount: $50.00" in card.text
    approve, deny = _data(card, "a"), _data(card, "d")
    assert approve.startswith("a:")
    assert deny.startswith("d:")
    assert len(approve.encode()) <= 64
    assert approve[2:] == deny[2:]
    assert chat_agent.SENT == []

    world.api.push_press(ALICE, card.message_id, approve)
    await world.poll()
    assert chat_agent.SENT == [{"payee": "bob", "amount": "50"}]
    assert world.api.answers[-1]["text"] == "Approved."
    assert world.api.texts(ALICE)[-2:] == ["Approved.", "sent"]
    assert world.api.edits[-1]["message_id"] == str(card.message_id)

    world.api.push_press(ALICE, card.message_id, approve)  # pressed again: nothing more
    await world.poll()
    assert world.api.answers[-1]["text"] == DECIDED
    assert len(chat_agent.SENT) == 1


async def test_deny_never_executes(world: World) -> None:
    world.api.push_message(ALICE, "pay bob 20")
    await world.poll()
    (card,) = world.api.cards(ALICE)
    world.api.push_press(ALICE, card.message_id, _data(card, "d"))
    await world.poll()
    assert world.api.answers[-1]["text"] == "Denied."
    assert chat_agent.SENT == []
    assert await world.agent.pending_approvals(principal="alice") == []


async def test_forged_presses_are_refused_and_audited(world: World) -> None:
    world.api.push_message(ALICE, "pay mallory 60")
    await world.poll()
    (card,) = world.api.cards(ALICE)
    # Bob's chat presses a button carrying Alice's token; then a made-up token
    world.api.push_press(BOB, card.message_id, _data(card, "a"))
    world.api.push_press(ALICE, card.message_id, "a:AAAAAAAAAAAAAAAA")
    world.api.push_press(ALICE, card.message_id, "x" * 64)
    await world.poll()
    assert [a["text"] for a in world.api.answers] == [NOT_VALID] * 3
    assert chat_agent.SENT == []
    assert len(await world.agent.pending_approvals(principal="alice")) == 1
    audit = await world.channel.records.audit_entries()
    assert [(e.chat_id, e.what) for e in audit] == [
        (BOB, "forged"),
        (ALICE, "forged"),
        (ALICE, "forged"),
    ]


async def test_a_card_whose_action_changed_is_refused(world: World) -> None:
    world.api.push_message(ALICE, "pay bob 40")
    await world.poll()
    (card,) = world.api.cards(ALICE)
    conn = sqlite3.connect(world.db)  # the approval's arguments change behind the card
    conn.execute(
        "UPDATE approvals SET args = ?, args_digest = ? WHERE status = 'pending'",
        (json.dumps({"payee": "mallory", "amount": "40"}), "0" * 64),
    )
    conn.commit()
    conn.close()
    world.api.push_press(ALICE, card.message_id, _data(card, "a"))
    await world.poll()
    assert world.api.answers[-1]["text"] == STALE
    assert chat_agent.SENT == []
    audit = await world.channel.records.audit_entries()
    assert [e.what for e in audit] == ["stale"]


async def test_a_chat_not_allowed_is_ignored_and_audited(world: World) -> None:
    world.api.push_message(STRANGER, "pay me 5")
    await world.poll()
    assert world.api.texts(STRANGER) == []
    assert await world.agent.list_runs() == []
    (entry,) = await world.channel.records.audit_entries()
    assert (entry.chat_id, entry.what) == (STRANGER, "ignored")


async def test_an_explicit_action_asks_for_the_amount(world: World) -> None:
    world.api.push_message(ALICE, "pay carol 250")
    await world.poll()
    (card,) = world.api.cards(ALICE)
    assert "type the amount" in card.text
    world.api.push_press(ALICE, card.message_id, _data(card, "a"))
    await world.poll()
    assert world.api.texts(ALICE)[-1] == TYPE_AMOUNT
    world.api.push_message(ALICE, "25")  # the wrong amount: refused, nothing runs
    await world.poll()
    assert world.api.texts(ALICE)[-1].startswith("Not approved:")
    assert chat_agent.SENT == []
    world.api.push_press(ALICE, card.message_id, _data(card, "a"))
    world.api.push_message(ALICE, "250")
    await world.poll()
    assert chat_agent.SENT == [{"payee": "carol", "amount": "250"}]
    assert world.api.texts(ALICE)[-2:] == ["Approved.", "sent"]


async def test_a_long_reply_is_split_within_the_limit(world: World) -> None:
    world.api.push_message(ALICE, "long")
    await world.poll()
    pieces = world.api.texts(ALICE)
    assert len(pieces) == 3
    assert all(utf16_length(p) <= 4096 for p in pieces)
    assert all(p.endswith(".") for p in pieces)  # cut at paragraph ends
    assert "\n\n".join(pieces) == chat_agent.long_text()


async def test_the_rate_limit_answers_the_eleventh_message(world: World) -> None:
    for i in range(11):
        world.api.push_message(ALICE, f"message {i}")
    await world.poll()
    texts = world.api.texts(ALICE)
    assert texts[:10] == [f"you said: message {i}" for i in range(10)]
    assert texts[10] == "Too many messages: try again in 60 s."
    world.clock.advance(60)
    world.api.push_message(ALICE, "later")
    await world.poll()
    assert world.api.texts(ALICE)[-1] == "you said: later"


async def test_the_token_never_shows(
    world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    world.api.push_message(ALICE, f"my token is {TOKEN}")
    world.api.push_message(BOB, "pay carol 30")
    await world.poll()
    (card,) = world.api.cards(BOB)
    world.api.push_press(BOB, card.message_id, _data(card, "a"))
    await world.poll()
    assert chat_agent.SENT  # the whole path ran, with the client logging at DEBUG
    secret = TOKEN.split(":", 1)[1]
    assert any("getUpdates" in r.getMessage() for r in caplog.records)
    for record in caplog.records:
        assert secret not in record.getMessage()
    assert all(secret not in t for t in world.api.texts(ALICE))
    for run in await world.agent.list_runs():
        for event in await world.agent.store.read_events(run.run_id):
            assert secret not in event.model_dump_json()

    # a token the API refuses: the error says so without the token
    bad = "123456:BAD-canaryTOKENcanary_0123456789abcdef"
    other, store = await _world(tmp_path / "other.sqlite3", world.api, world.url, token=bad)
    with pytest.raises(TelegramError) as refused:
        await other.channel.start()
    await other.channel.close()
    await store.close()
    assert bad.split(":", 1)[1] not in str(refused.value)
    assert "InvalidToken" in str(refused.value)
    for record in caplog.records:
        assert bad.split(":", 1)[1] not in record.getMessage()
        assert secret not in (record.exc_text or "")


async def test_an_update_interrupted_mid_handling_is_audited_not_run_again(world: World) -> None:
    # as a process killed after recording the update and before handling it leaves it
    await world.channel.records.record_update(world.api.next_update_id, world.clock.now())
    interrupted = world.api.push_message(ALICE, "pay bob 50")
    await world.poll()
    assert world.api.texts(ALICE) == []
    assert await world.agent.list_runs() == []
    (entry,) = await world.channel.records.audit_entries()
    assert (entry.chat_id, entry.what) == (ALICE, "interrupted")
    assert await world.channel.records.next_offset() == interrupted + 1


async def test_the_offset_is_committed_after_each_update(world: World) -> None:
    assert await world.channel.records.next_offset() is None
    world.api.push_message(ALICE, "one")
    last = world.api.push_message(BOB, "two")
    await world.poll()
    assert await world.channel.records.next_offset() == last + 1
    await world.poll()  # the next poll confirms them: the stand-in forgets them
    assert world.api.offsets[-1] == last + 1
    assert world.api.updates == []


async def test_a_failing_target_is_told_and_polling_goes_on(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(principal: Principal, text: str, channel: str) -> str:
        raise RuntimeError(f"boom with {TOKEN}")

    world.channel.inbox.add("broken", broken)
    world.channel.target = "broken"
    world.api.push_message(ALICE, "hello")
    last = world.api.push_message(BOB, "hello")
    assert await world.poll() == 2
    assert world.api.texts(ALICE) == [FAILED]
    assert world.api.texts(BOB) == [FAILED]
    assert await world.channel.records.next_offset() == last + 1
    logged = [r for r in caplog.records if "could not be handled" in r.getMessage()]
    assert len(logged) == 2
    assert all(TOKEN.split(":")[1] not in (r.exc_text or "") for r in logged)
    assert all("boom with" in (r.exc_text or "") for r in logged)


async def test_a_card_shows_the_guards_sentence_for_the_person(
    tmp_path: Path, standin: tuple[BotApi, str]
) -> None:
    chat_agent.SENT.clear()
    made, store = await _world(
        tmp_path / "runs.sqlite3", *standin, factory=chat_agent.guarded_factory
    )
    try:
        await made.channel.start()
        made.api.push_message(ALICE, "pay bob 50")  # irreversible, and no preview was shown
        await made.poll()
        (card,) = made.api.cards(ALICE)
    finally:
        await made.channel.close()
        await store.close()
    assert (
        "Note: send cannot be undone, and no preview was shown first: check every detail "
        "below before you approve." in card.text.splitlines()
    )
    assert "state exactly what will happen" not in card.text  # the model's sentence
