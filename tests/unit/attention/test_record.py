"""The record's contract on SQLite (memory and file) and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

import pytest

from fiduciary.attention.actions import decision_id_of
from fiduciary.attention.record import AttentionRecord, DecisionRecord
from fiduciary.attention.types import Incoming

from ...postgres_support import new_database

T0 = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def record(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AttentionRecord]:
    if request.param == "memory":
        made = AttentionRecord()
    elif request.param == "sqlite":
        made = AttentionRecord(str(tmp_path / "attention.sqlite3"))
    else:
        dsn = await new_database()  # the store's database: the attention tables join it
        made = await AttentionRecord.postgres(dsn)
        # the same tables again: CREATE TABLE IF NOT EXISTS, under the schema lock
        await (await AttentionRecord.postgres(dsn)).close()
    yield made
    await made.close()


def incoming(i: int) -> Incoming:
    return Incoming(
        id=f"ev-{i}", source="s", type="tick", at=T0 + timedelta(minutes=i), data={"i": i}
    )


def decision(event: Incoming, **changes: object) -> DecisionRecord:
    fields: dict[str, object] = {
        "decision_id": decision_id_of(event.source, event.id),
        "source": event.source,
        "event_id": event.id,
        "event_type": event.type,
        "principal": None,
        "at": T0,
        "kind": "decision",
        "input_digest": "d" * 64,
        "route": "notify",
        "probabilities": {"notify": 1.0},
    }
    fields.update(changes)
    return DecisionRecord(**fields)  # type: ignore[arg-type]


async def test_take_persists_the_cursor_and_dedups_on_the_ring(record: AttentionRecord) -> None:
    assert await record.cursor("s") is None
    fresh = await record.take("s", "c1", [incoming(1), incoming(2)], now=T0)
    assert [e.id for e in fresh] == ["ev-1", "ev-2"]
    again = await record.take("s", "c2", [incoming(2), incoming(3)], now=T0)
    assert [e.id for e in again] == ["ev-3"]
    assert await record.cursor("s") == "c2"
    assert [e.id for e in await record.pending("s")] == ["ev-1", "ev-2", "ev-3"]
    assert (await record.pending())[0].data == {"i": 1}


async def test_one_decision_per_event_and_the_feed_in_order(record: AttentionRecord) -> None:
    await record.take("s", "c", [incoming(1), incoming(2)], now=T0)
    first = await record.decide(decision(incoming(1)))
    twice = await record.decide(decision(incoming(1), route="drop", action="dropped"))
    assert twice.decision_id == first.decision_id
    assert twice.route == "notify"  # the first decision stands
    assert await record.decisions() == []  # not acted on yet
    assert [d.event_id for d in await record.unacted()] == ["ev-1"]
    await record.decide(decision(incoming(2), action="dropped"))
    assert await record.decisions() == []  # the feed waits for the first
    run_id = uuid4()
    await record.acted(first.decision_id, "run:completed", run_id)
    feed = await record.decisions()
    assert [(d.event_id, d.action) for d in feed] == [
        ("ev-1", "run:completed"),
        ("ev-2", "dropped"),
    ]
    assert feed[0].run_id == run_id
    assert feed[1].seq > feed[0].seq
    assert [d.event_id for d in await record.decisions(after=feed[0].seq)] == ["ev-2"]
    assert await record.pending() == []
    kept = await record.event_of(feed[0])
    assert kept is not None
    assert kept.data == {"i": 1}


async def test_an_event_naming_another_source_is_keyed_by_the_source_that_took_it(
    record: AttentionRecord,
) -> None:
    (taken,) = await record.take("s", "c", [replace(incoming(1), source="elsewhere")], now=T0)
    assert taken.source == "s"
    (pending,) = await record.pending("s")
    assert pending.source == "s"
    made = await record.decide(decision(pending, action="dropped"))
    assert (made.source, made.event_id) == ("s", "ev-1")
    assert await record.pending() == []
    kept = await record.event_of(made)
    assert kept is not None
    assert (kept.source, kept.data) == ("s", {"i": 1})
