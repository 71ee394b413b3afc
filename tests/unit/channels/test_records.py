"""The channel's own tables, on SQLite and on PostgreSQL."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

import pytest

from fiduciary import ManualClock
from fiduciary.channels.links import Linked, LinkRefused, PersonLinks
from fiduciary.channels.records import Card, ChannelRecords


@pytest.fixture(params=["sqlite", "postgres"])
async def records(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ChannelRecords]:
    if request.param == "sqlite":
        opened = await ChannelRecords.open("telegram:1", sqlite_path=str(tmp_path / "r.sqlite3"))
    else:
        from tests.postgres_support import new_database

        opened = await ChannelRecords.open("telegram:1", dsn=await new_database())
    try:
        yield opened
    finally:
        await opened.close()


async def test_an_update_is_recorded_once_and_the_offset_only_grows(
    records: ChannelRecords,
) -> None:
    now = ManualClock().now()
    assert await records.next_offset() is None
    assert await records.record_update(5_000_000_000, now) is None  # ids beyond 32 bits
    assert await records.record_update(5_000_000_000, now) == "received"
    await records.handled(5_000_000_000)
    assert await records.record_update(5_000_000_000, now) == "handled"
    await records.commit_offset(5_000_000_001)
    await records.commit_offset(7)  # never backwards
    assert await records.next_offset() == 5_000_000_001
    other = ChannelRecords(records._sql, "telegram:2")  # another bot, the same tables
    assert await other.next_offset() is None
    assert await other.record_update(5_000_000_000, now) is None


async def test_cards_awaiting_amounts_and_audit(records: ChannelRecords) -> None:
    now = ManualClock().now()
    approval = uuid4()
    card = Card("tok", -100123, approval, "d" * 64, "alice", None)
    assert await records.add_card(card, now)
    assert not await records.add_card(Card("tok2", -100123, approval, "e", "alice", None), now)
    await records.card_sent("tok", 42)
    assert await records.card("tok") == Card("tok", -100123, approval, "d" * 64, "alice", 42)
    assert await records.card("tok2") is None
    assert [c.token for c in await records.cards_of(-100123)] == ["tok"]
    await records.await_amount(-100123, "tok")
    assert await records.awaiting_amount(-100123) == "tok"
    await records.stop_awaiting(-100123)
    assert await records.awaiting_amount(-100123) is None
    await records.audit(now, 7, "ignored", "not allowed")
    await records.audit(now, None, "interrupted", "update 1")
    entries = await records.audit_entries()
    assert [(e.chat_id, e.what, e.detail) for e in entries] == [
        (7, "ignored", "not allowed"),
        (None, "interrupted", "update 1"),
    ]


async def test_a_link_code_links_once_before_it_expires(records: ChannelRecords) -> None:
    clock = ManualClock()
    links = PersonLinks(records.sql)
    assert await links.user_of("alice") is None
    code = await links.issue("alice", now=clock.now())
    assert re.fullmatch(r"[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}", code)
    rows = await records.sql.run("SELECT code_hash FROM fiduciary_channel_link_codes")
    assert rows == [(hashlib.sha256(code.replace("-", "").encode()).hexdigest(),)]
    typed = f"  {code.lower().replace('-', ' ')} "  # as a person might type it
    assert await links.redeem(typed, 5_000_000_001, now=clock.now()) == Linked(
        "alice", 5_000_000_001
    )
    assert await links.redeem(code, 7, now=clock.now()) == LinkRefused("used")
    assert await links.user_of("alice") == 5_000_000_001

    later = await links.issue("alice", now=clock.now(), ttl=timedelta(minutes=1))
    clock.advance(60)
    assert await links.redeem(later, 7, now=clock.now()) == LinkRefused("expired")
    assert await links.redeem("0000-0000-0000", 7, now=clock.now()) == LinkRefused("unknown")
    burnt = await links.issue("alice", now=clock.now())
    await links.burn(burnt, now=clock.now())
    assert await links.redeem(burnt, 7, now=clock.now()) == LinkRefused("used")

    again = await links.issue("alice", now=clock.now())  # linking again replaces the account
    assert await links.redeem(again, 8, now=clock.now()) == Linked("alice", 8)
    assert await links.user_of("alice") == 8
    assert await PersonLinks(records.sql, "other").user_of("alice") is None
