"""``fiduciary.bus``: what each run event becomes on the global stream, and ``follow``."""

from __future__ import annotations

import asyncio
from typing import get_args
from uuid import uuid4

from fiduciary.bus import BUS_ADAPTER, bus_event, follow, run_event_types
from fiduciary.events import Event
from fiduciary.stores.base import GlobalEvent
from fiduciary.stores.memory import MemoryStore
from tests.contract.builders import deltas, every_event, make_run, started

TIMEOUT = 10.0


def test_every_run_event_maps_to_at_most_one_bus_event_named_by_its_position() -> None:
    run_id = uuid4()
    mapped = {}
    for position, event in enumerate(every_event(run_id), start=100):
        bus = bus_event(GlobalEvent(position, "alice", "running", event))
        if bus is None:
            assert event.type not in run_event_types()
            continue
        assert event.type in run_event_types([bus.type])
        assert (bus.position, bus.run_id, bus.seq, bus.principal) == (
            position,
            run_id,
            event.seq,
            "alice",
        )
        assert BUS_ADAPTER.validate_json(BUS_ADAPTER.dump_json(bus)) == bus
        mapped[event.type] = bus.model_dump(exclude={"position", "run_id", "seq", "at"})

    assert mapped["run_started"]["status"] == "running"
    waiting = mapped["pending_action"]
    assert (waiting["status"], waiting["name"], waiting["tier"]) == (
        "awaiting_approval",
        "send",
        "explicit",
    )
    assert str(waiting["amount_usd"]) == "1250.10"
    assert mapped["tool_call_start"]["phase"] == "started"
    assert mapped["action_resolved"]["phase"] == "approved"
    assert mapped["tool_call_rejected"]["phase"] == "denied"
    assert mapped["text_delta"]["text"] == "Let me check your balance. "
    # every type of the event union is decided: carried by the bus, or left off on purpose
    every_type = {cls.model_fields["type"].default for cls in get_args(get_args(Event)[0])}
    assert set(mapped) == run_event_types()  # each type the bus claims to carry, it carries
    assert every_type - set(mapped) == {
        "user_message",
        "thinking_delta",
        "thinking_done",
        "guard_fired",
        "post_guard_fired",
        "text_guard_fired",
        "tool_progress",
        "compaction",
        "context_layers",
        "todo_update",
        "canvas",  # a document for the run's own view, not a state change of the run
        "pending_input",  # reserved, never emitted yet: it joins the bus when it is
        "usage",
        "turn_complete",
        "turn_retracted",
    }
    assert "input" not in mapped["tool_call_start"]  # never a call's arguments


async def test_follow_reads_the_past_then_each_commit_until_stopped() -> None:
    store = MemoryStore()
    run = make_run()
    await store.create_run(run, [started(run.run_id)])
    stop, read_the_past = asyncio.Event(), asyncio.Event()
    got: list[str] = []

    async def reader() -> None:
        async for batch in follow(store, wait_seconds=60, stop=stop):  # woken by the bell
            got.extend(f"{b.type}:{b.seq}" for b in batch)
            read_the_past.set()
            if len(got) == 3:
                stop.set()

    async with asyncio.timeout(TIMEOUT):
        reading = asyncio.ensure_future(reader())
        await read_the_past.wait()  # the past first ...
        await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 2))  # ... then live
        await reading
    assert got == ["run_status:1", "text:2", "text:3"]
