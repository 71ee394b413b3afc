"""``EventsFile``: complete lines only, the cursor is lines taken, a bad line stops it clearly."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fiduciary.attention.events_file import EventsFile
from fiduciary.attention.record import AttentionRecord
from fiduciary.attention.testing import RuleJudge
from fiduciary.attention.types import Batch, PermanentError
from fiduciary.attention.watch import Attention, Report
from fiduciary.clock import ManualClock

from .test_watch import NOTIFY_ALL

T0 = datetime(2026, 3, 2, 8, tzinfo=UTC)


def line(i: int, **extra: Any) -> str:
    event = {"id": f"ev-{i}", "type": "price_move", "at": T0.isoformat(), **extra}
    return json.dumps(event) + "\n"


async def batches(source: EventsFile, cursor: str | None = None) -> list[Batch]:
    return [batch async for batch in source.batches(cursor)]


async def test_complete_lines_in_batches_with_the_line_count_as_cursor(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(
        line(1, principal="alice", data={"asset": "SUI"}, role="consequence", source="x")
        + "\n"
        + line(3)
        + '{"id": "ev-4", "type": "t", "at": "2026-03-02T08:00:00+00:00"'
    )
    found = await batches(EventsFile(path, size=2, once=True))
    assert [(len(b.events), b.cursor) for b in found] == [(1, "2"), (1, "3")]
    first = found[0].events[0]
    assert (first.id, first.source, first.principal, first.role) == (
        "ev-1",
        "file",
        "alice",
        "consequence",
    )
    assert dict(first.data) == {"asset": "SUI"}
    assert first.at == T0
    # the rest of the half-written line arrives: only it is read, from the cursor
    with path.open("a") as out:
        out.write("}\n")
    (rest,) = await batches(EventsFile(path, once=True), "3")
    assert [e.id for e in rest.events] == ["ev-4"]
    assert rest.cursor == "4"


async def test_a_time_without_an_offset_is_utc_and_a_missing_file_is_empty(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.jsonl"
    assert await batches(EventsFile(path, once=True)) == []
    path.write_text(json.dumps({"id": "a", "type": "t", "at": "2026-03-02T08:00:00"}) + "\n")
    ((event,),) = [b.events for b in await batches(EventsFile(path, once=True))]
    assert event.at == T0


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("not json", "not JSON"),
        ("[1]", "an event is a JSON object"),
        (
            '{"id": "x", "at": "2026-03-02T08:00:00+00:00"}',
            "id, type and at must be strings (not so: type)",
        ),
        ('{"id": "x", "type": "t", "at": "yesterday"}', "at is not an ISO 8601 time"),
        ('{"id": "x", "type": "t", "at": "2026-03-02", "data": [1]}', "data must be an object"),
        ('{"id": "x", "type": "t", "at": "2026-03-02", "role": "boss"}', "role must be one of"),
    ],
)
async def test_a_bad_line_stops_the_source_naming_it_after_the_good_ones(
    tmp_path: Path, bad: str, message: str
) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(line(1) + bad + "\n" + line(3))
    taken: list[Batch] = []

    async def take_all() -> None:
        async for batch in EventsFile(path, once=True).batches(None):
            taken.append(batch)

    with pytest.raises(PermanentError) as caught:
        await take_all()
    assert str(caught.value).startswith(f"{path}:2: {message}")
    assert [(len(b.events), b.cursor) for b in taken] == [(1, "1")]


async def test_through_the_watcher_a_bad_line_is_reported_and_the_fixed_file_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(line(1) + "oops\n" + line(3))
    record = AttentionRecord(str(tmp_path / "attention.sqlite3"))
    reports: list[Report] = []
    judge = RuleJudge(lambda _: "drop")

    def watcher() -> Attention:
        return Attention(
            judge=judge,
            record=record,
            routes=NOTIFY_ALL,
            sources=[EventsFile(path, once=True)],
            clock=ManualClock(T0),
            on_report=reports.append,
        )

    await watcher().run()
    assert [(r.kind, r.source) for r in reports] == [("stopped", "file")]
    assert reports[0].message.startswith(f"{path}:2: not JSON")
    assert await record.cursor("file") == "1"
    path.write_text(line(1) + line(2) + line(3))
    await watcher().run()
    assert [d.event_id for d in await record.decisions()] == ["ev-1", "ev-2", "ev-3"]
    assert judge.calls == 3
    await record.close()
