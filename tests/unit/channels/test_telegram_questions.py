"""Questions the model asks (``ask_person``) on Telegram: a card with one button per choice,
or the person's next message as the answer; the run goes on with it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fiduciary import Agent, ask_person
from fiduciary.channels.telegram import ANSWER_BELOW, DECIDED, NOT_VALID
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls

from .botapi import BotApi, Sent
from .test_telegram import ALICE, BOB, World, _world


def asking_agent(store: Store) -> Agent:
    scripts = [
        Script(
            re.compile(r"^book$"),
            [
                ToolCalls(
                    [Call("ask_person", {"question": "Which day?", "choices": ["Mon", "Fri"]})]
                ),
                Reply(lambda r: f"Booked for {r['ask_person']['answer']}."),
            ],
        ),
        Script(
            re.compile(r"^hello$"),
            [
                ToolCalls([Call("ask_person", {"question": "Your name?"})]),
                Reply(lambda r: f"Hello {r['ask_person']['answer']}!"),
            ],
        ),
    ]
    return Agent(model=ScriptedModel(scripts), capabilities=[ask_person()], store=store)


@pytest.fixture
async def world(tmp_path: Path, standin: tuple[BotApi, str]) -> AsyncIterator[World]:
    made, store = await _world(tmp_path / "runs.sqlite3", *standin, factory=asking_agent)
    await made.channel.start()
    try:
        yield made
    finally:
        await made.channel.close()
        await store.close()


def _choice(card: Sent, text: str) -> str:
    assert card.reply_markup is not None
    rows = card.reply_markup["inline_keyboard"]
    return str(next(row[0]["callback_data"] for row in rows if row[0]["text"] == text))


async def test_a_choice_pressed_answers_and_the_run_goes_on(world: World) -> None:
    world.api.push_message(ALICE, "book")
    await world.poll()
    (card,) = world.api.cards(ALICE)
    assert card.text.startswith("Question: Which day?\n  1. Mon\n  2. Fri\n")
    fri = _choice(card, "Fri")
    assert fri.startswith("c1:")
    assert len(fri.encode()) <= 64
    # another chat's press, and an approve verb on a question's card, are refused
    world.api.push_press(BOB, card.message_id, fri)
    world.api.push_press(ALICE, card.message_id, "a:" + fri.split(":", 1)[1])
    await world.poll()
    assert [a["text"] for a in world.api.answers[-2:]] == [NOT_VALID, NOT_VALID]
    assert len(await world.agent.questions(principal="alice")) == 1

    world.api.push_press(ALICE, card.message_id, fri)
    await world.poll()
    assert world.api.answers[-1]["text"] == "Answered."
    assert world.api.texts(ALICE)[-2:] == ["Answered: Fri", "Booked for Fri."]
    assert world.api.edits[-1]["message_id"] == str(card.message_id)
    world.api.push_press(ALICE, card.message_id, _choice(card, "Mon"))  # too late
    await world.poll()
    assert world.api.answers[-1]["text"] == DECIDED
    (run,) = await world.agent.list_runs(principal="alice")
    assert run.status == "completed"


async def test_a_question_without_choices_is_answered_by_the_next_message(world: World) -> None:
    world.api.push_message(ALICE, "hello")
    await world.poll()
    texts = world.api.texts(ALICE)
    assert texts[-1].startswith("Question: Your name?")
    assert texts[-1].endswith(ANSWER_BELOW)
    assert world.api.cards(ALICE) == []  # no buttons
    world.api.push_message(ALICE, "Ada")
    await world.poll()
    assert world.api.texts(ALICE)[-2:] == ["Answered: Ada", "Hello Ada!"]
    (run,) = await world.agent.list_runs(principal="alice")
    assert run.status == "completed"
