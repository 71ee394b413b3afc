"""Only the person linked to a principal acts for it on Telegram, whatever chat they share.

Driven over HTTP through the Bot API stand-in: the code comes from ``fiduciary telegram link``
(a real process), the person sends ``/link CODE``, and every message and press is checked
against the linked account; effects are counted at the capability (``chat_agent.SENT``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fiduciary import ConfigurationError
from fiduciary.channels.telegram import (
    DECIDED,
    GROUP_REFUSED,
    LINK_IN_GROUP,
    LINK_REFUSED,
    LINKED,
    NOT_LINKED,
    NOT_THE_PERSON,
    TYPE_AMOUNT,
    TelegramChannel,
)

from . import chat_agent
from .botapi import BotApi
from .conftest import TOKEN
from .test_telegram import ALICE, World, _data, _world

GROUP = -100777  # a supergroup where alice and mallory are both members
MALLORY = 333
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
async def group(tmp_path: Path, standin: tuple[BotApi, str]) -> AsyncIterator[World]:
    """The family group is allowed as alice's (opted in); nobody is linked yet."""
    chat_agent.SENT.clear()
    made, store = await _world(
        tmp_path / "runs.sqlite3",
        *standin,
        allow={GROUP: "alice", ALICE: "alice"},
        groups=True,
        linked={},
    )
    await made.channel.start()
    try:
        yield made
    finally:
        await made.channel.close()
        await store.close()


def _code_from_cli(db: Path, principal: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fiduciary", "telegram", "link", "--principal", principal],
        cwd=ROOT,
        env={**os.environ, "FIDUCIARY_DB": str(db)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    match = re.search(r"^/link ([0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4})$", done.stdout, re.M)
    assert match is not None, done.stdout
    return match.group(1)


async def _audit(world: World) -> list[tuple[int | None, str]]:
    return [(e.chat_id, e.what) for e in await world.channel.records.audit_entries()]


async def test_only_the_linked_person_approves_in_a_shared_group(group: World) -> None:
    code = _code_from_cli(group.db, "alice")
    group.api.push_message(ALICE, f"/link {code}")
    await group.poll()
    assert group.api.texts(ALICE) == [
        LINKED.format(user_id=ALICE, principal="alice", chat_id=ALICE)
    ]
    assert await group.channel.links.user_of("alice") == ALICE

    group.api.push_message(GROUP, "pay bob 50", user_id=ALICE)
    await group.poll()
    (card,) = group.api.cards(GROUP)
    approve = _data(card, "a")

    # another member of the group presses alice's card: refused, audited, nothing runs
    group.api.push_press(GROUP, card.message_id, approve, user_id=MALLORY)
    await group.poll()
    assert group.api.answers[-1]["text"] == NOT_THE_PERSON
    assert chat_agent.SENT == []
    assert len(await group.agent.pending_approvals(principal="alice")) == 1
    assert group.api.edits == []  # the card keeps its buttons for alice
    assert (await _audit(group))[-1] == (GROUP, "not_the_person")

    # alice presses the same card: it runs, once
    group.api.push_press(GROUP, card.message_id, approve, user_id=ALICE)
    await group.poll()
    assert chat_agent.SENT == [{"payee": "bob", "amount": "50"}]
    assert group.api.answers[-1]["text"] == "Approved."
    group.api.push_press(GROUP, card.message_id, approve, user_id=ALICE)
    await group.poll()
    assert group.api.answers[-1]["text"] == DECIDED
    assert len(chat_agent.SENT) == 1


async def test_another_members_messages_start_nothing_and_type_no_amount(group: World) -> None:
    code = await group.channel.links.issue("alice", now=group.clock.now())
    group.api.push_message(ALICE, f"/link@fiduciary_bot\n{code.lower()}")  # as typed
    await group.poll()

    group.api.push_message(GROUP, "pay mallory 90", user_id=MALLORY)
    await group.poll()
    assert group.api.texts(GROUP) == [NOT_THE_PERSON]
    assert await group.agent.list_runs() == []

    # alice asks for an explicit payment and presses Approve; mallory types the amount
    group.api.push_message(GROUP, "pay carol 250", user_id=ALICE)
    await group.poll()
    (card,) = group.api.cards(GROUP)
    group.api.push_press(GROUP, card.message_id, _data(card, "a"), user_id=ALICE)
    await group.poll()
    assert group.api.texts(GROUP)[-1] == TYPE_AMOUNT
    group.api.push_message(GROUP, "250", user_id=MALLORY)
    await group.poll()
    assert group.api.texts(GROUP)[-1] == NOT_THE_PERSON
    assert chat_agent.SENT == []
    assert len(await group.agent.pending_approvals(principal="alice")) == 1
    group.api.push_message(GROUP, "250", user_id=ALICE)
    await group.poll()
    assert chat_agent.SENT == [{"payee": "carol", "amount": "250"}]
    assert [w for _, w in await _audit(group)].count("not_the_person") == 2


async def test_nothing_starts_while_no_account_is_linked(group: World) -> None:
    group.api.push_message(ALICE, "pay bob 5")
    await group.poll()
    assert group.api.texts(ALICE) == [NOT_LINKED]
    assert await group.agent.list_runs() == []
    assert chat_agent.SENT == []
    assert await _audit(group) == [(ALICE, "unlinked")]


async def test_used_expired_unknown_and_group_sent_codes_are_refused(group: World) -> None:
    links = group.channel.links
    code = await links.issue("alice", now=group.clock.now())
    group.api.push_message(ALICE, f"/link {code}")
    group.api.push_message(MALLORY, f"/link {code}")  # the same code again, by someone else
    await group.poll()
    assert group.api.texts(MALLORY) == [LINK_REFUSED["used"]]
    assert await links.user_of("alice") == ALICE

    late = await links.issue("alice", now=group.clock.now())
    group.clock.advance(10 * 60)
    group.api.push_message(MALLORY, f"/link {late}")
    group.api.push_message(MALLORY, "/link 0000-0000-0000")
    await group.poll()
    assert group.api.texts(MALLORY)[1:] == [LINK_REFUSED["expired"], LINK_REFUSED["unknown"]]

    shown = await links.issue("alice", now=group.clock.now())
    group.api.push_message(GROUP, f"/link {shown}", user_id=MALLORY)  # posted in the group
    await group.poll()
    assert group.api.texts(GROUP) == [LINK_IN_GROUP]
    group.api.push_message(MALLORY, f"/link {shown}")  # so it no longer works anywhere
    await group.poll()
    assert group.api.texts(MALLORY)[-1] == LINK_REFUSED["used"]

    assert await links.user_of("alice") == ALICE  # never mallory
    audit = await _audit(group)
    assert audit.count((MALLORY, "link_refused")) == 4
    assert audit.count((GROUP, "link_refused")) == 1
    assert audit.count((ALICE, "linked")) == 1
    for entry in await group.channel.records.audit_entries():
        for issued in (code, late, shown):
            assert issued not in entry.detail


async def test_a_group_chat_needs_an_explicit_opt_in(
    tmp_path: Path, standin: tuple[BotApi, str]
) -> None:
    chat_agent.SENT.clear()
    made, store = await _world(
        tmp_path / "runs.sqlite3", *standin, allow={4242: "alice"}, linked={"alice": ALICE}
    )
    try:
        await made.channel.start()
        with pytest.raises(ConfigurationError, match="chat -100777 is a group chat"):
            TelegramChannel(
                token=TOKEN,
                agent=made.agent,
                inbox=made.channel.inbox,
                target="chat",
                allow={GROUP: "alice"},
                records=made.channel.records,
                api=made.url,
            )
        # a group whose id does not look like one is still refused by its type
        made.api.push_message(4242, "pay bob 5", user_id=ALICE, chat_type="group")
        await made.poll()
        assert made.api.texts(4242) == [GROUP_REFUSED]
        assert await made.agent.list_runs() == []
        assert chat_agent.SENT == []
        assert await _audit(made) == [(4242, "group_refused")]
    finally:
        await made.channel.close()
        await store.close()


def test_the_command_line_refuses_a_group_without_the_opt_in(tmp_path: Path) -> None:
    env = {**os.environ, "FIDUCIARY_TELEGRAM_TOKEN": "123456:AAF-canary_0123456789"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fiduciary",
            "telegram",
            "--agent",
            "tests.unit.channels.chat_agent:factory",
            "--allow",
            f"{GROUP}=alice",
            "--db",
            str(tmp_path / "runs.sqlite3"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert " ".join(done.stderr.split()) == (
        f"error: chat {GROUP} is a group chat: add --allow-groups to allow group chats "
        "(every member can write in them; only the principal's linked account is obeyed)"
    )
    assert not (tmp_path / "runs.sqlite3").exists()  # refused before anything was opened


def test_link_codes_are_stored_hashed(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    code = _code_from_cli(db, "alice")
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(db.name))
    assert b"fiduciary_channel_link_codes" in raw
    assert code.encode() not in raw
    assert code.replace("-", "").encode() not in raw
