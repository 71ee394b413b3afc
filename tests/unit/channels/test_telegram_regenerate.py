"""Telegram: a card whose capability can make fresh arguments has a New quote button; pressing
it supersedes the card's approval and a new card, with the fresh arguments, follows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from itertools import count
from pathlib import Path

import pytest

from fiduciary import Agent, Policy, capability
from fiduciary.channels.telegram import DECIDED
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

from . import chat_agent
from .botapi import BotApi, Sent
from .test_telegram import ALICE, World, _world

QUOTES = count(1)


def quoting_factory(store: Store) -> Agent:
    @capability(
        kind="execute",
        operation="send",
        amount_usd=lambda a, ctx: Decimal(a.amount),
        regenerate=lambda a, ctx: {**a.model_dump(mode="json"), "quote": f"q{next(QUOTES)}"},
        quoted_at=lambda a, ctx: ctx.clock.now(),
    )
    async def convert(amount: str, quote: str) -> dict[str, str]:
        """Convert money at a quoted rate."""
        return {"converted": amount, "quote": quote}

    script = Script(
        "convert",
        [ToolCalls([Call("convert", {"amount": "50", "quote": "q0"})]), Reply("converted")],
    )
    return Agent(
        model=ScriptedModel([script]),
        capabilities=[convert],
        store=store,
        policy=Policy(preset="balanced"),
        guards=[],
        authorize=allow_all,
    )


@pytest.fixture
async def world(tmp_path: Path, standin: tuple[BotApi, str]) -> AsyncIterator[World]:
    chat_agent.SENT.clear()
    made, store = await _world(tmp_path / "runs.sqlite3", *standin, factory=quoting_factory)
    await made.channel.start()
    try:
        yield made
    finally:
        await made.channel.close()
        await store.close()


def _button(card: Sent, text: str) -> str:
    assert card.reply_markup is not None
    buttons = card.reply_markup["inline_keyboard"][0]
    return str(next(b["callback_data"] for b in buttons if b["text"] == text))


async def test_new_quote_replaces_the_card(world: World) -> None:
    world.api.push_message(ALICE, "convert 50")
    await world.poll()
    (card,) = world.api.cards(ALICE)
    assert "quote: q0" in card.text
    fresh = _button(card, "New quote")
    assert fresh.startswith("r:")
    assert len(fresh.encode()) <= 64

    world.api.push_press(ALICE, card.message_id, fresh)
    await world.poll()
    assert world.api.answers[-1]["text"] == "A new quote was asked for."
    cards = world.api.cards(ALICE)
    assert len(cards) == 2  # the new card, with the fresh arguments
    assert "quote: q" in cards[1].text
    assert "quote: q0" not in cards[1].text

    world.api.push_press(ALICE, card.message_id, _button(card, "Approve"))  # the old card
    await world.poll()
    assert world.api.answers[-1]["text"] == DECIDED  # refused: it was replaced
