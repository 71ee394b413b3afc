"""The ``GlobalEvents`` contract: every run's committed events in one order, on every backend.

On PostgreSQL an event becomes readable only once every older transaction on the server has
ended (other tests' included), so reads here wait for what they expect, on the commit bell,
rather than assume it is readable the moment its commit returned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from uuid import UUID

from fiduciary.events import Event
from fiduciary.stores.base import GlobalEvent, RunRecord, RunStatus, Store

from .builders import deltas, make_run, started

TIMEOUT = 60.0  # a hang guard: on PostgreSQL, any transaction on the server delays reads


async def new_run(store: Store, principal: str = "alice", **kwargs: object) -> RunRecord:
    run = make_run(principal=principal, **kwargs)  # type: ignore[arg-type]
    await store.create_run(run, [started(run.run_id, principal=principal)])
    return run


async def append(
    store: Store, run_id: UUID, count: int, *, status: RunStatus | None = None
) -> list[Event]:
    run = await store.get_run(run_id)
    assert run is not None
    events = deltas(run_id, run.last_seq + 1, count)
    await store.commit(run_id, epoch=run.epoch, events=events, status=status)
    return list(events)


async def read(
    store: Store,
    count: int,
    *,
    after: int = 0,
    page: int = 100,
    principal: str | None = None,
    statuses: Collection[RunStatus] | None = None,
    types: Collection[str] | None = None,
) -> list[GlobalEvent]:
    """The next ``count`` global events after ``after``, read a page at a time, waiting on the
    commit bell for what is not readable yet (bounded); then nothing more is readable."""
    got: list[GlobalEvent] = []
    cursor = after
    async with asyncio.timeout(TIMEOUT):
        while len(got) < count:
            since = store.commit_generation
            read = await store.read_global(
                after=cursor, limit=page, principal=principal, statuses=statuses, types=types
            )
            got += read.events
            cursor = read.next_after
            if not read.events and not read.more:
                await store.wait_for_commits(since=since)
    assert len(got) == count
    rest = await store.read_global(
        after=cursor, principal=principal, statuses=statuses, types=types
    )
    assert rest.events == []
    return got


def keys(events: list[GlobalEvent]) -> list[tuple[UUID, int]]:
    return [(g.event.run_id, g.event.seq) for g in events]


async def test_the_events_of_every_run_in_commit_order(store: Store) -> None:
    a = await new_run(store)
    b = await new_run(store, principal="bob")
    expected = [(a.run_id, 1), (b.run_id, 1)]
    for run, count in ((a, 2), (b, 1), (a, 1), (b, 3), (a, 2)):
        expected += [(e.run_id, e.seq) for e in await append(store, run.run_id, count)]

    everything = await read(store, len(expected))

    assert keys(everything) == expected
    assert len({g.position for g in everything}) == len(expected)
    assert [g.principal for g in everything[:2]] == ["alice", "bob"]
    assert everything[2].event == (await store.read_events(a.run_id))[1]  # the event itself


async def test_reading_on_after_any_position_gives_exactly_the_rest(store: Store) -> None:
    a = await new_run(store)
    b = await new_run(store)
    await append(store, a.run_id, 3)
    await append(store, b.run_id, 2)
    everything = await read(store, 7)

    for i, seen in enumerate(everything):
        assert await read(store, 6 - i, after=seen.position) == everything[i + 1 :]
    assert await read(store, 7, page=2) == everything  # a page at a time: the same

    later = await append(store, b.run_id, 2)  # a reader that has read everything gets the new
    assert [g.event for g in await read(store, 2, after=everything[-1].position)] == later


async def test_concurrent_commits_of_two_runs_interleave_in_one_order(store: Store) -> None:
    a = await new_run(store)
    b = await new_run(store)

    async def talk(run: RunRecord) -> None:
        for _ in range(20):
            await append(store, run.run_id, 2)

    # commits of both runs queued together: group commit writes them in shared transactions
    await asyncio.gather(talk(a), talk(b))

    everything = await read(store, 82, page=7)
    for run in (a, b):
        seqs = [g.event.seq for g in everything if g.event.run_id == run.run_id]
        assert seqs == list(range(1, 42))  # each run in seq order, each event once
    assert len({g.position for g in everything}) == 82


async def test_a_principal_never_sees_another_principals_events(store: Store) -> None:
    alice = await new_run(store, principal="alice")
    bob = await new_run(store, principal="bob")
    await append(store, alice.run_id, 3)
    await append(store, bob.run_id, 2)
    await append(store, alice.run_id, 1)

    seen_by_bob = await read(store, 3, principal="bob")
    seen_by_alice = await read(store, 5, principal="alice")

    assert {g.event.run_id for g in seen_by_bob} == {bob.run_id}
    assert {g.principal for g in seen_by_bob} == {"bob"}
    assert {g.event.run_id for g in seen_by_alice} == {alice.run_id}
    assert await read(store, 0, principal="mallory") == []
    # resuming after one of alice's positions, bob still sees only his own
    assert await read(store, 0, principal="bob", after=seen_by_bob[-1].position) == []


async def test_filters_by_the_runs_status_and_the_events_type(store: Store) -> None:
    running = await new_run(store)
    waiting = await new_run(store)
    await append(store, running.run_id, 2)
    await append(store, waiting.run_id, 1, status="awaiting_approval")

    by_status = await read(store, 2, statuses={"awaiting_approval"})
    assert keys(by_status) == [(waiting.run_id, 1), (waiting.run_id, 2)]
    assert {g.run_status for g in by_status} == {"awaiting_approval"}
    by_type = await read(store, 3, types={"text_delta"})
    assert keys(by_type) == [(running.run_id, 2), (running.run_id, 3), (waiting.run_id, 2)]
    both = await read(store, 1, statuses=["awaiting_approval", "failed"], types=["text_delta"])
    assert keys(both) == [(waiting.run_id, 2)]
    assert (await store.read_global(types=())).events == []
    assert (await store.read_global(statuses=())).events == []


async def test_a_filtered_reader_reads_past_the_events_it_does_not_want(store: Store) -> None:
    """A reader of one principal among many never reads the others' events twice: it goes on
    after the last event it read, whether that one passed its filters or not."""
    alice = await new_run(store, principal="alice")
    bob = await new_run(store, principal="bob")
    await append(store, bob.run_id, 6)
    (mine,) = await read(store, 1, principal="alice")
    everything = await read(store, 8)

    first = await store.read_global(after=0, limit=3, principal="alice")
    assert [g.event.run_id for g in first.events] == [alice.run_id]
    assert (first.next_after, first.more) == (everything[2].position, True)
    second = await store.read_global(after=first.next_after, limit=3, principal="alice")
    assert second.events == []
    assert (second.next_after, second.more) == (everything[5].position, True)
    last = await store.read_global(after=second.next_after, limit=3, principal="alice")
    assert last.events == []
    assert last.next_after == everything[-1].position  # read past bob's, to the end
    assert mine.event.run_id == alice.run_id

    later = await append(store, alice.run_id, 1)
    assert [g.event for g in await read(store, 1, after=last.next_after, principal="alice")] == (
        later
    )


async def test_a_commit_rings_the_bell(store: Store) -> None:
    run = await new_run(store)
    since = store.commit_generation
    waiting = asyncio.ensure_future(store.wait_for_commits(since=since))
    assert store.commit_generation == since

    await append(store, run.run_id, 1)

    async with asyncio.timeout(TIMEOUT):
        assert await waiting > since
    assert await store.wait_for_commits(since=since) > since  # passed already: at once
