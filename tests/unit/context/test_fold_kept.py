"""A conversation's next message reads only the log's new events, unless someone else drove the
run meanwhile: then the whole log is folded again (and both give the same requests)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fiduciary.events import Event
from fiduciary.testing import MemoryStore

from .test_loop_context import Reader, agent, talk


class Counting(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []  # after_seq of each read of a run's events

    async def read_events(
        self, run_id: UUID, *, after_seq: int = 0, limit: int | None = None
    ) -> Any:
        self.reads.append(after_seq)
        return await super().read_events(run_id, after_seq=after_seq, limit=limit)


async def test_the_next_message_reads_only_the_new_events() -> None:
    store = Counting()
    model = Reader()
    events: list[Event] = await talk(agent(model, store), ["one", "two", "three"])
    assert store.reads, "a continued run reads its log"
    assert 0 not in store.reads  # never the whole log again
    assert all(after > 0 for after in store.reads)
    assert events[-1].type == "run_completed"


async def test_after_another_agent_drove_the_run_the_whole_log_is_folded_again() -> None:
    store = Counting()
    first, other = Reader(), Reader()
    mine, theirs = agent(first, store), agent(other, store)
    events = await talk(mine, ["one"])
    run_id = events[0].run_id
    async for _ in theirs.run("two", principal="ann", run_id=run_id):
        pass
    store.reads.clear()
    async for _ in mine.run("three", principal="ann", run_id=run_id):
        pass
    assert store.reads[0] == 0  # its kept fold is stale: read from the start
    # the request is what a fresh fold of the log gives: both exchanges before it
    assert first.requests[-2].messages[:-2] == other.requests[-1].messages
