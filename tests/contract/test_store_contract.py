"""The ``Store`` contract, run against every backend of ``conftest.BACKENDS``."""

from __future__ import annotations

import asyncio
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable
from uuid import UUID, uuid4

import pytest

from fiduciary.events import Event, PendingAction, UserMessage
from fiduciary.exceptions import ConflictError, StaleEpochError, StoreError
from fiduciary.stores.base import (
    ApprovalRecord,
    AuditRecord,
    RunRecord,
    Store,
    Subscription,
)

from .builders import (
    at,
    deltas,
    every_event,
    make_approval,
    make_audit,
    make_ledger,
    make_run,
    started,
)

TIMEOUT = 5.0


@contextmanager
def refused(kind: type[StoreError], message: str) -> Iterator[None]:
    """The store refused with exactly ``kind`` (not its parent or a sibling) saying ``message``:
    which refusal, not merely that something failed."""
    with pytest.raises(StoreError) as caught:
        yield
    assert type(caught.value) is kind, repr(caught.value)
    assert str(caught.value) == message


@runtime_checkable
class OverflowAware(Protocol):
    """A subscription that says whether it was closed for falling behind."""

    @property
    def overflowed(self) -> bool: ...


Snapshot = tuple[RunRecord | None, list[Event], list[ApprovalRecord], list[AuditRecord]]


async def snapshot(store: Store, run_id: UUID) -> Snapshot:
    return (
        await store.get_run(run_id),
        await store.read_events(run_id),
        await store.list_approvals(run_id=run_id),
        await store.audit_records(run_id),
    )


async def new_run(store: Store, **kwargs: Any) -> RunRecord:
    """A run created with its ``run_started`` event (last_seq 1, epoch 0)."""
    run = make_run(**kwargs)
    await store.create_run(run, [started(run.run_id, principal=run.principal)])
    return run


async def drain(sub: Subscription) -> list[Event]:
    """Close ``sub`` and return what it had received (bounded)."""
    sub.close()
    async with asyncio.timeout(TIMEOUT):
        return [event async for event in sub]


# --- runs -------------------------------------------------------------------------------


async def test_create_and_get_run_round_trips(store: Store) -> None:
    run = make_run(title="Rent — März ✓", scopes=("a:b", "c"))
    await store.create_run(run)

    assert await store.get_run(run.run_id) == run
    assert await store.read_events(run.run_id) == []
    assert await store.get_run(uuid4()) is None


async def test_create_run_with_events_sets_last_seq(store: Store) -> None:
    run = make_run()
    events = [started(run.run_id), *deltas(run.run_id, 2, 3)]
    await store.create_run(run, events)

    stored = await store.get_run(run.run_id)
    assert stored is not None
    assert stored.last_seq == 4
    assert await store.read_events(run.run_id) == events


async def test_create_run_twice_is_a_conflict_and_changes_nothing(store: Store) -> None:
    run = await new_run(store)
    before = await snapshot(store, run.run_id)

    with refused(ConflictError, f"run {run.run_id} already exists"):
        await store.create_run(
            replace(run, principal="mallory", title="other"), deltas(run.run_id, 1, 2)
        )

    assert await snapshot(store, run.run_id) == before


async def test_create_run_with_bad_seqs_is_a_conflict_and_creates_nothing(store: Store) -> None:
    run = make_run()
    with refused(ConflictError, f"run {run.run_id}: expected seq 1, got 2"):
        await store.create_run(run, deltas(run.run_id, 2, 2))

    assert await store.get_run(run.run_id) is None
    assert await store.read_events(run.run_id) == []


async def test_list_runs_filters_newest_first_with_limit(store: Store) -> None:
    a1 = await new_run(store, principal="alice", created=1)
    b1 = await new_run(store, principal="bob", created=2)
    a2 = await new_run(store, principal="alice", created=3, status="awaiting_approval")
    a3 = await new_run(store, principal="alice", created=4, status="completed")

    def ids(runs: list[RunRecord]) -> list[UUID]:
        return [r.run_id for r in runs]

    assert ids(await store.list_runs()) == [a3.run_id, a2.run_id, b1.run_id, a1.run_id]
    assert ids(await store.list_runs(principal="alice")) == [a3.run_id, a2.run_id, a1.run_id]
    assert ids(await store.list_runs(status="running")) == [b1.run_id, a1.run_id]
    assert ids(await store.list_runs(principal="alice", status="awaiting_approval")) == [a2.run_id]
    assert ids(await store.list_runs(principal="alice", limit=2)) == [a3.run_id, a2.run_id]
    assert await store.list_runs(principal="nobody") == []
    listed = await store.list_runs(principal="bob")
    assert listed == [await store.get_run(b1.run_id)]


# --- commit -----------------------------------------------------------------------------


async def test_commit_appends_with_gapless_seqs(store: Store) -> None:
    run = await new_run(store)
    first = deltas(run.run_id, 2, 3)
    second = deltas(run.run_id, 5, 2)

    await store.commit(run.run_id, epoch=0, events=first)
    await store.commit(run.run_id, epoch=0, events=second, status="awaiting_approval")

    events = await store.read_events(run.run_id)
    assert [e.seq for e in events] == [1, 2, 3, 4, 5, 6]
    assert events[1:] == first + second
    stored = await store.get_run(run.run_id)
    assert stored is not None
    assert stored.last_seq == 6
    assert stored.status == "awaiting_approval"
    assert stored.updated_at == second[-1].at
    assert stored.created_at == run.created_at


async def test_commit_without_events_changes_status_only(store: Store) -> None:
    run = await new_run(store)
    await store.commit(run.run_id, epoch=0, status="cancelled")

    stored = await store.get_run(run.run_id)
    assert stored == replace(run, last_seq=1, status="cancelled")


async def test_read_events_after_seq_and_limit(store: Store) -> None:
    run = await new_run(store)
    await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 9))

    assert [e.seq for e in await store.read_events(run.run_id, after_seq=7)] == [8, 9, 10]
    assert [e.seq for e in await store.read_events(run.run_id, after_seq=2, limit=3)] == [
        3,
        4,
        5,
    ]
    assert await store.read_events(run.run_id, after_seq=10) == []
    assert await store.read_events(run.run_id, limit=0) == []
    assert await store.read_events(uuid4()) == []


@pytest.mark.parametrize(
    "case", ["gap", "already_written", "not_consecutive", "other_run", "starts_at_zero"]
)
async def test_commit_with_wrong_seqs_is_a_conflict_and_writes_nothing(
    store: Store, case: str
) -> None:
    run = await new_run(store)
    await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 2))  # last_seq 3
    before = await snapshot(store, run.run_id)
    rid, stranger = run.run_id, uuid4()
    bad: dict[str, tuple[list[Event], str]] = {
        "gap": (deltas(rid, 5, 2), f"run {rid}: expected seq 4, got 5"),
        "already_written": (deltas(rid, 3, 2), f"run {rid}: expected seq 4, got 3"),
        "not_consecutive": (
            [*deltas(rid, 4, 1), *deltas(rid, 6, 1)],
            f"run {rid}: expected seq 5, got 6",
        ),
        "other_run": (
            [*deltas(rid, 4, 1), *deltas(stranger, 5, 1)],
            f"event for run {stranger} appended to run {rid}",
        ),
        "starts_at_zero": (
            [UserMessage.model_construct(run_id=rid, seq=0, at=at(9), text="x")],
            f"run {rid}: expected seq 4, got 0",
        ),
    }
    events, message = bad[case]

    with refused(ConflictError, message):
        await store.commit(
            rid,
            epoch=0,
            events=events,
            status="awaiting_approval",
            approvals=[make_approval(rid)],
            audit=[make_audit(rid)],
        )

    assert await snapshot(store, rid) == before
    assert await store.autonomous_spend("alice", since=at(0)) == 0


async def test_commit_with_an_existing_approval_is_a_conflict_and_writes_nothing(
    store: Store,
) -> None:
    run = await new_run(store)
    approval = make_approval(run.run_id)
    await store.commit(run.run_id, epoch=0, approvals=[approval])
    before = await snapshot(store, run.run_id)

    with refused(ConflictError, f"approval {approval.approval_id} already exists"):
        await store.commit(
            run.run_id,
            epoch=0,
            events=deltas(run.run_id, 2, 3),  # valid: only the approval is refused
            status="completed",
            approvals=[replace(approval, status="approved")],
            audit=[make_audit(run.run_id)],
        )

    assert await snapshot(store, run.run_id) == before


async def test_commit_with_a_stale_epoch_is_refused_and_writes_nothing(store: Store) -> None:
    run = await new_run(store)
    lease = await store.acquire(run.run_id, owner="w1", now=at(1), ttl_seconds=30)
    assert lease is not None
    assert lease.epoch == 1
    before = await snapshot(store, run.run_id)

    for epoch in (0, 2):
        with refused(StaleEpochError, f"run {run.run_id}: epoch {epoch} is stale (now 1)"):
            await store.commit(
                run.run_id,
                epoch=epoch,
                events=deltas(run.run_id, 2, 1),
                status="failed",
                approvals=[make_approval(run.run_id)],
                audit=[make_audit(run.run_id)],
            )

    assert await snapshot(store, run.run_id) == before
    await store.commit(run.run_id, epoch=1, events=deltas(run.run_id, 2, 1))
    assert [e.seq for e in await store.read_events(run.run_id)] == [1, 2]


async def test_commit_with_release_applies_the_commit_then_frees_the_lease(store: Store) -> None:
    run = await new_run(store)
    lease = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=300)
    assert lease is not None
    events = deltas(run.run_id, 2, 2)

    await store.commit(
        run.run_id, epoch=lease.epoch, events=events, status="completed", release=True
    )

    stored = await store.get_run(run.run_id)
    assert stored == replace(
        lease,
        last_seq=3,
        status="completed",
        updated_at=events[-1].at,
        lease_owner=None,
        lease_until=None,
    )
    assert (await store.read_events(run.run_id))[1:] == events
    taken = await store.acquire(run.run_id, owner="w2", now=at(11), ttl_seconds=30)
    assert taken is not None
    assert taken.epoch == lease.epoch + 1


@pytest.mark.parametrize("case", ["stale_epoch", "wrong_seqs"])
async def test_a_refused_commit_with_release_keeps_the_lease(store: Store, case: str) -> None:
    run = await new_run(store)
    lease = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=300)
    assert lease is not None
    before = await snapshot(store, run.run_id)
    epoch = lease.epoch + 1 if case == "stale_epoch" else lease.epoch
    first = 2 if case == "stale_epoch" else 5
    kind, message = {
        "stale_epoch": (StaleEpochError, f"epoch {epoch} is stale (now {lease.epoch})"),
        "wrong_seqs": (ConflictError, "expected seq 2, got 5"),
    }[case]

    with refused(kind, f"run {run.run_id}: {message}"):
        await store.commit(
            run.run_id,
            epoch=epoch,
            events=deltas(run.run_id, first, 1),
            status="completed",
            release=True,
        )

    assert await snapshot(store, run.run_id) == before
    assert await store.acquire(run.run_id, owner="w2", now=at(11), ttl_seconds=30) is None


async def test_a_commit_and_a_ledger_begin_issued_together_both_apply(store: Store) -> None:
    """The loop issues the events before a write's effect beside the ledger's started row (a
    group-committing store writes them in one transaction): both apply, in either store."""
    run = await new_run(store)
    lease = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=300)
    assert lease is not None
    events = deltas(run.run_id, 2, 3)
    entry = make_ledger(run.run_id)

    done, begun = await asyncio.gather(
        store.commit(run.run_id, epoch=lease.epoch, events=events),
        store.ledger_begin(entry, epoch=lease.epoch),
    )

    assert (done, begun) == (None, None)
    assert (await store.read_events(run.run_id))[1:] == events
    assert await store.ledger_get(entry.key) == entry
    # the finish, issued beside the commit of the call's outcome
    finished = at(30)
    await asyncio.gather(
        store.ledger_finish(entry.key, status="done", at=finished, result={"ok": True}),
        store.commit(run.run_id, epoch=lease.epoch, events=deltas(run.run_id, 5, 1)),
    )
    assert await store.ledger_get(entry.key) == replace(
        entry, status="done", finished_at=finished, result={"ok": True}
    )
    assert [e.seq for e in await store.read_events(run.run_id)] == [1, 2, 3, 4, 5]


async def test_a_stale_commit_and_ledger_begin_issued_together_write_nothing(
    store: Store,
) -> None:
    run = await new_run(store)
    old = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=30)
    assert old is not None
    new = await store.acquire(run.run_id, owner="w2", now=at(40), ttl_seconds=30)
    assert new is not None
    entry = make_ledger(run.run_id)
    before = await snapshot(store, run.run_id)

    results = await asyncio.gather(
        store.commit(run.run_id, epoch=old.epoch, events=deltas(run.run_id, 2, 1)),
        store.ledger_begin(entry, epoch=old.epoch),
        return_exceptions=True,
    )

    assert [type(r) for r in results] == [StaleEpochError, StaleEpochError]
    assert await snapshot(store, run.run_id) == before
    assert await store.ledger_get(entry.key) is None


async def test_a_commit_that_begins_a_ledger_row_applies_both(store: Store) -> None:
    """The loop's commit before a write's effect: its events, then the ledger's started row,
    durable together; the existing row when the key is taken (the events commit anyway)."""
    run = await new_run(store)
    lease = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=300)
    assert lease is not None
    events = deltas(run.run_id, 2, 2)
    entry = make_ledger(run.run_id)

    begun = await store.commit(
        run.run_id, epoch=lease.epoch, events=events, status="running", ledger_begin=entry
    )

    assert begun is None
    assert (await store.read_events(run.run_id))[1:] == events
    assert await store.ledger_get(entry.key) == entry
    again = replace(entry, started_at=at(20))
    more = deltas(run.run_id, 4, 1)
    existing = await store.commit(run.run_id, epoch=lease.epoch, events=more, ledger_begin=again)
    assert existing == entry
    assert (await store.read_events(run.run_id))[-1:] == more
    assert await store.ledger_get(entry.key) == entry


@pytest.mark.parametrize("case", ["stale_epoch", "wrong_seqs", "another_run"])
async def test_a_refused_commit_begins_no_ledger_row(store: Store, case: str) -> None:
    run = await new_run(store)
    lease = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=300)
    assert lease is not None
    epoch = lease.epoch + 1 if case == "stale_epoch" else lease.epoch
    first = 5 if case == "wrong_seqs" else 2
    entry = make_ledger(uuid4() if case == "another_run" else run.run_id)
    before = await snapshot(store, run.run_id)
    kind, message = {
        "stale_epoch": (
            StaleEpochError,
            f"run {run.run_id}: epoch {epoch} is stale (now {lease.epoch})",
        ),
        "wrong_seqs": (ConflictError, f"run {run.run_id}: expected seq 2, got 5"),
        "another_run": (
            StoreError,
            f"ledger row of run {entry.run_id} in a commit of {run.run_id}",
        ),
    }[case]

    with refused(kind, message):
        await store.commit(
            run.run_id, epoch=epoch, events=deltas(run.run_id, first, 1), ledger_begin=entry
        )

    assert await snapshot(store, run.run_id) == before
    assert await store.ledger_get(entry.key) is None


async def test_commit_to_an_unknown_run_is_refused(store: Store) -> None:
    run_id = uuid4()
    with refused(StoreError, f"run {run_id} does not exist"):
        await store.commit(run_id, epoch=0, events=deltas(run_id, 1, 1))
    assert await store.get_run(run_id) is None
    assert await store.read_events(run_id) == []


async def test_events_of_every_type_round_trip_exactly(store: Store) -> None:
    run = make_run()
    events = every_event(run.run_id)
    union = typing.get_args(typing.get_args(Event)[0])
    all_types = {cls.model_fields["type"].default for cls in union}
    assert {e.type for e in events} == all_types, "every_event() must cover every event type"

    await store.create_run(run, events[:1])
    await store.commit(run.run_id, epoch=0, events=events[1:])

    read = await store.read_events(run.run_id)
    assert read == events
    assert [type(e) for e in read] == [type(e) for e in events]
    assert [e.model_dump_json() for e in read] == [e.model_dump_json() for e in events]
    pending = next(e for e in read if isinstance(e, PendingAction))
    assert str(pending.amount_usd) == "1250.10"


# --- leases -----------------------------------------------------------------------------


async def test_acquire_a_free_run_gives_a_new_epoch_and_a_lease(store: Store) -> None:
    run = await new_run(store)

    lease = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=30)

    assert lease == replace(run, last_seq=1, epoch=1, lease_owner="w1", lease_until=at(40))
    assert await store.get_run(run.run_id) == lease


async def test_acquire_is_refused_to_another_owner_while_the_lease_is_live(
    store: Store,
) -> None:
    run = await new_run(store)
    lease = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=30)

    assert await store.acquire(run.run_id, owner="w2", now=at(39.999999), ttl_seconds=30) is None
    assert await store.get_run(run.run_id) == lease


async def test_acquire_again_by_the_owner_gives_a_higher_epoch(store: Store) -> None:
    run = await new_run(store)
    first = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=30)
    again = await store.acquire(run.run_id, owner="w1", now=at(20), ttl_seconds=30)

    assert first is not None
    assert again is not None
    assert again.epoch == first.epoch + 1
    assert again.lease_until == at(50)


async def test_a_lapsed_lease_is_taken_over_and_the_old_epoch_fenced(store: Store) -> None:
    run = await new_run(store)
    old = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=30)
    assert old is not None

    new = await store.acquire(run.run_id, owner="w2", now=at(40), ttl_seconds=30)  # lapsed at 40

    assert new is not None
    assert new.lease_owner == "w2"
    assert new.epoch > old.epoch
    with refused(
        StaleEpochError, f"run {run.run_id}: epoch {old.epoch} is stale (now {new.epoch})"
    ):
        await store.commit(run.run_id, epoch=old.epoch, events=deltas(run.run_id, 2, 1))
    assert await store.renew(run.run_id, epoch=old.epoch, now=at(41), ttl_seconds=30) is False
    await store.release(run.run_id, epoch=old.epoch)
    assert await store.get_run(run.run_id) == new
    await store.commit(run.run_id, epoch=new.epoch, events=deltas(run.run_id, 2, 1))


async def test_renew_extends_the_lease_of_the_current_epoch_only(store: Store) -> None:
    run = await new_run(store)
    lease = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=30)
    assert lease is not None

    assert await store.renew(run.run_id, epoch=lease.epoch, now=at(35), ttl_seconds=30) is True
    assert await store.get_run(run.run_id) == replace(lease, lease_until=at(65))
    # Live until 65 now: another owner is still refused at 50.
    assert await store.acquire(run.run_id, owner="w2", now=at(50), ttl_seconds=30) is None
    assert await store.renew(run.run_id, epoch=lease.epoch + 1, now=at(35), ttl_seconds=1) is False
    assert await store.renew(uuid4(), epoch=1, now=at(35), ttl_seconds=1) is False


async def test_release_frees_the_run_for_another_owner(store: Store) -> None:
    run = await new_run(store)
    lease = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=300)
    assert lease is not None

    await store.release(run.run_id, epoch=lease.epoch)

    released = await store.get_run(run.run_id)
    assert released == replace(lease, lease_owner=None, lease_until=None)
    taken = await store.acquire(run.run_id, owner="w2", now=at(11), ttl_seconds=30)
    assert taken is not None
    assert taken.epoch == lease.epoch + 1
    await store.release(uuid4(), epoch=1)  # an unknown run: nothing to do


async def test_acquire_an_unknown_run_gives_none(store: Store) -> None:
    assert await store.acquire(uuid4(), owner="w1", now=at(0), ttl_seconds=30) is None


async def test_runs_to_resume_are_running_runs_without_a_live_lease(store: Store) -> None:
    free = await new_run(store, created=1)
    live = await new_run(store, created=2)
    lapsed = await new_run(store, created=3)
    released = await new_run(store, created=4)
    waiting = await new_run(store, created=0, status="awaiting_approval")
    done = await new_run(store, created=0, status="completed")
    await store.acquire(live.run_id, owner="w1", now=at(100), ttl_seconds=60)
    await store.acquire(lapsed.run_id, owner="w1", now=at(30), ttl_seconds=60)  # until 90
    lease = await store.acquire(released.run_id, owner="w1", now=at(100), ttl_seconds=60)
    assert lease is not None
    await store.release(released.run_id, epoch=lease.epoch)
    await store.acquire(waiting.run_id, owner="w1", now=at(0), ttl_seconds=1)
    await store.acquire(done.run_id, owner="w1", now=at(0), ttl_seconds=1)

    resume = await store.runs_to_resume(now=at(100))

    assert [r.run_id for r in resume] == [free.run_id, lapsed.run_id, released.run_id]
    assert resume[1] == await store.get_run(lapsed.run_id)
    limited = await store.runs_to_resume(now=at(100), limit=1)
    assert [r.run_id for r in limited] == [free.run_id]
    later = await store.runs_to_resume(now=at(160))  # the live lease lapsed at 160
    assert live.run_id in [r.run_id for r in later]


async def suspended_run(
    store: Store, *, executor: str = "server", created: float = 0.0
) -> tuple[RunRecord, ApprovalRecord]:
    """A run suspended on one pending approval, as a drive leaves it: committed, released."""
    run = await new_run(store, created=created)
    lease = await store.acquire(run.run_id, owner="w1", now=at(1), ttl_seconds=30)
    assert lease is not None
    approval = make_approval(run.run_id, executor=executor)
    status: typing.Literal["awaiting_approval", "awaiting_client_result"] = (
        "awaiting_client_result" if executor == "client" else "awaiting_approval"
    )
    await store.commit(run.run_id, epoch=lease.epoch, status=status, approvals=[approval])
    await store.release(run.run_id, epoch=lease.epoch)
    return run, approval


async def resumable(store: Store, now: float) -> list[UUID]:
    return [r.run_id for r in await store.runs_to_resume(now=at(now))]


@pytest.mark.parametrize(
    ("executor", "decision"), [("server", "approved"), ("server", "denied"), ("client", "result")]
)
async def test_a_decided_approval_makes_its_suspended_run_resumable(
    store: Store, executor: str, decision: str
) -> None:
    run, approval = await suspended_run(store, executor=executor)
    assert await resumable(store, 10) == []  # waiting on a person: nothing to do

    if decision == "result":
        decided = approval.with_(status="client_result", decided_at=at(8), client_result={"ok": 1})
    else:
        decided = approval.with_(status=decision, decided_by="alice", decided_at=at(8))
    assert await store.decide_approval(decided)

    assert await resumable(store, 10) == [run.run_id]


async def test_a_decision_stays_findable_until_a_drive_takes_it_up(store: Store) -> None:
    """A drive that leases the run and dies before writing leaves the decision to another."""
    run, approval = await suspended_run(store)
    assert await store.decide_approval(approval.with_(status="approved", decided_at=at(8)))
    dead = await store.acquire(run.run_id, owner="w2", now=at(10), ttl_seconds=30)
    assert dead is not None

    assert await resumable(store, 20) == []  # its lease is live: never stolen
    assert await resumable(store, 40) == [run.run_id]  # the lease lapsed: found again

    taken = await store.acquire(run.run_id, owner="w3", now=at(40), ttl_seconds=30)
    assert taken is not None
    await store.commit(run.run_id, epoch=taken.epoch, status="running")  # the decision taken up
    await store.commit(run.run_id, epoch=taken.epoch, status="awaiting_approval")  # waits again
    await store.release(run.run_id, epoch=taken.epoch)
    assert await resumable(store, 80) == []


async def test_a_decision_made_while_the_run_is_driven_is_found_after_it_suspends(
    store: Store,
) -> None:
    run, approval = await suspended_run(store)
    lease = await store.acquire(run.run_id, owner="w2", now=at(10), ttl_seconds=30)
    assert lease is not None
    await store.commit(run.run_id, epoch=lease.epoch, status="running")
    assert await store.decide_approval(approval.with_(status="approved", decided_at=at(12)))
    await store.commit(run.run_id, epoch=lease.epoch, status="awaiting_approval")
    assert await resumable(store, 15) == []  # still leased
    await store.release(run.run_id, epoch=lease.epoch)

    assert await resumable(store, 15) == [run.run_id]


async def test_an_expired_approval_makes_its_suspended_run_resumable(store: Store) -> None:
    run, _ = await suspended_run(store)

    assert await resumable(store, 3604) == []
    assert await resumable(store, 3605) == [run.run_id]  # it expires at 5 + 3600


async def test_an_ended_run_is_never_resumable(store: Store) -> None:
    run, approval = await suspended_run(store)
    assert await store.decide_approval(approval.with_(status="denied", decided_at=at(8)))
    lease = await store.acquire(run.run_id, owner="w2", now=at(10), ttl_seconds=30)
    assert lease is not None
    await store.commit(run.run_id, epoch=lease.epoch, status="completed")
    await store.release(run.run_id, epoch=lease.epoch)

    assert await resumable(store, 4000) == []


# --- approvals --------------------------------------------------------------------------


async def test_an_approval_is_created_by_commit_with_its_event(store: Store) -> None:
    run = await new_run(store)
    approval = make_approval(run.run_id, amount_usd=Decimal("1250.10"))
    pending = PendingAction(
        run_id=run.run_id,
        seq=2,
        at=at(5),
        approval_id=approval.approval_id,
        tool_use_id=approval.tool_use_id,
        name="send",
        input=approval.args,
        description="Send 1,250.10 USD to landlord",
        amount_usd=approval.amount_usd,
        tier="confirm",
        modifiable_fields=list(approval.modifiable_fields),
        guard_notes=[],
        expires_at=approval.expires_at,
        args_digest=approval.args_digest,
    )

    await store.commit(
        run.run_id, epoch=0, events=[pending], status="awaiting_approval", approvals=[approval]
    )

    stored = await store.get_approval(approval.approval_id)
    assert stored == approval
    assert stored is not None
    assert str(stored.amount_usd) == "1250.10"
    assert isinstance(stored.modifiable_fields, tuple)
    assert await store.read_events(run.run_id, after_seq=1) == [pending]
    assert await store.get_approval(uuid4()) is None


async def test_approvals_round_trip_every_field(store: Store) -> None:
    run = await new_run(store)
    undecided = make_approval(run.run_id, amount_usd=None, executor="client")
    decided = replace(
        make_approval(run.run_id, amount_usd=Decimal("0.000001")),
        status="client_result",
        decided_by="alice",
        decided_at=at(7.654321),
        reason="done on the phone",
        approved_args={"to": "landlord", "amount": "12.00", "memo": None},
        approved_digest="sha256:" + "99" * 32,
        client_result={"ok": True, "ref": ["tx", 42], "fee": 0.25},
    )

    await store.commit(run.run_id, epoch=0, approvals=[undecided, decided])

    assert await store.get_approval(undecided.approval_id) == undecided
    assert await store.get_approval(decided.approval_id) == decided


async def test_list_approvals_filters(store: Store) -> None:
    run_a = await new_run(store, principal="alice")
    run_b = await new_run(store, principal="bob")
    a1 = make_approval(run_a.run_id, principal="alice", created=1)
    a2 = make_approval(run_a.run_id, principal="alice", created=2, status="approved")
    b1 = make_approval(run_b.run_id, principal="bob", created=3)
    await store.commit(run_a.run_id, epoch=0, approvals=[a2, a1])
    await store.commit(run_b.run_id, epoch=0, approvals=[b1])

    def ids(records: list[ApprovalRecord]) -> list[UUID]:
        return [r.approval_id for r in records]

    assert ids(await store.list_approvals()) == [a1.approval_id, a2.approval_id, b1.approval_id]
    assert await store.list_approvals(principal="alice") == [a1, a2]
    assert await store.list_approvals(run_id=run_b.run_id) == [b1]
    assert await store.list_approvals(status="pending") == [a1, b1]
    assert await store.list_approvals(principal="alice", status="pending") == [a1]
    assert await store.list_approvals(principal="bob", run_id=run_a.run_id) == []
    assert await store.list_approvals(status="denied") == []


async def test_decide_approval_is_conditional_on_the_expected_status(store: Store) -> None:
    run = await new_run(store)
    approval = make_approval(run.run_id)
    await store.commit(run.run_id, epoch=0, approvals=[approval])
    approve = approval.with_(
        status="approved",
        decided_by="alice",
        decided_at=at(30),
        approved_args={**approval.args, "amount": "1200.00"},
        approved_digest="sha256:" + "12" * 32,
    )
    deny = approval.with_(status="denied", decided_by="bob", decided_at=at(31), reason="no")

    assert await store.decide_approval(approve) is True
    assert await store.decide_approval(deny) is False  # no longer pending
    assert await store.get_approval(approval.approval_id) == approve

    executed = approve.with_(status="client_result", client_result={"ref": "tx-1"})
    assert await store.decide_approval(executed, expected_status="pending") is False
    assert await store.decide_approval(executed, expected_status="approved") is True
    assert await store.get_approval(approval.approval_id) == executed

    unknown = make_approval(run.run_id)
    assert await store.decide_approval(unknown.with_(status="approved")) is False
    assert await store.get_approval(unknown.approval_id) is None


# --- ledger -----------------------------------------------------------------------------


async def test_ledger_begin_inserts_once_and_then_returns_the_existing_row(
    store: Store,
) -> None:
    run = await new_run(store)
    entry = make_ledger(run.run_id)

    assert await store.ledger_begin(entry, epoch=0) is None
    other = replace(entry, tool_use_id="toolu_99", capability="other", started_at=at(99))
    assert await store.ledger_begin(other, epoch=0) == entry
    assert await store.ledger_get(entry.key) == entry
    assert await store.ledger_get("missing") is None


async def test_ledger_begin_with_the_current_epoch_inserts(store: Store) -> None:
    run = await new_run(store)
    lease = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=30)
    assert lease is not None
    entry = make_ledger(run.run_id)

    assert await store.ledger_begin(entry, epoch=lease.epoch) is None
    assert await store.ledger_get(entry.key) == entry


async def test_ledger_begin_with_a_stale_epoch_is_refused_and_writes_nothing(
    store: Store,
) -> None:
    run = await new_run(store)
    old = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=30)
    assert old is not None
    new = await store.acquire(run.run_id, owner="w2", now=at(40), ttl_seconds=30)  # lapsed at 40
    assert new is not None
    assert new.epoch > old.epoch
    entry = make_ledger(run.run_id)
    before = await snapshot(store, run.run_id)

    for epoch in (old.epoch, new.epoch + 1):
        with refused(
            StaleEpochError, f"run {run.run_id}: epoch {epoch} is stale (now {new.epoch})"
        ):
            await store.ledger_begin(entry, epoch=epoch)

    assert await store.ledger_get(entry.key) is None
    assert await snapshot(store, run.run_id) == before
    # a key that exists is not handed to a stale holder either
    assert await store.ledger_begin(entry, epoch=new.epoch) is None
    with refused(
        StaleEpochError, f"run {run.run_id}: epoch {old.epoch} is stale (now {new.epoch})"
    ):
        await store.ledger_begin(replace(entry, tool_use_id="toolu_99"), epoch=old.epoch)
    assert await store.ledger_get(entry.key) == entry


async def test_ledger_begin_for_an_unknown_run_is_refused(store: Store) -> None:
    entry = make_ledger(uuid4())
    with refused(StoreError, f"run {entry.run_id} does not exist"):
        await store.ledger_begin(entry, epoch=0)
    assert await store.ledger_get(entry.key) is None


async def test_ledger_finish_records_the_outcome(store: Store) -> None:
    run = await new_run(store)
    done = make_ledger(run.run_id, key="k:done")
    failed = make_ledger(run.run_id, key="k:failed")
    await store.ledger_begin(done, epoch=0)
    await store.ledger_begin(failed, epoch=0)
    result = {"sent": "1250.10", "reference": "tx-81", "fees": [0.1, None], "ok": True}

    await store.ledger_finish("k:done", status="done", at=at(21.5), result=result)
    await store.ledger_finish("k:failed", status="failed", at=at(22), error="timeout")

    assert await store.ledger_get("k:done") == replace(
        done, status="done", finished_at=at(21.5), result=result
    )
    assert await store.ledger_get("k:failed") == replace(
        failed, status="failed", finished_at=at(22), error="timeout"
    )
    # A finished key is still "taken": begin returns the finished row.
    assert await store.ledger_begin(make_ledger(run.run_id, key="k:done"), epoch=0) == replace(
        done, status="done", finished_at=at(21.5), result=result
    )
    with refused(StoreError, "no ledger entry 'k:missing'"):
        await store.ledger_finish("k:missing", status="done", at=at(23))


async def test_ledger_retry_reopens_only_a_failed_row(store: Store) -> None:
    run = await new_run(store)
    for key in ("k:failed", "k:done", "k:started"):
        await store.ledger_begin(make_ledger(run.run_id, key=key), epoch=0)
    await store.ledger_finish("k:failed", status="failed", at=at(22), error="refused")
    await store.ledger_finish("k:done", status="done", at=at(22), result={"ok": True})

    assert await store.ledger_retry("k:failed", at=at(30)) is True
    reopened = await store.ledger_get("k:failed")
    assert reopened is not None
    assert (reopened.status, reopened.started_at, reopened.error) == ("started", at(30), None)
    assert reopened.finished_at is None
    # a second retry of the same attempt loses: the row is no longer failed
    assert await store.ledger_retry("k:failed", at=at(31)) is False
    assert await store.ledger_retry("k:done", at=at(31)) is False
    assert await store.ledger_retry("k:started", at=at(31)) is False
    assert await store.ledger_retry("k:missing", at=at(31)) is False
    done = await store.ledger_get("k:done")
    assert done is not None
    assert done.status == "done"


# --- audit and spend --------------------------------------------------------------------


async def test_audit_records_round_trip_in_order_per_run(store: Store) -> None:
    run = await new_run(store)
    other = await new_run(store)
    first = make_audit(run.run_id, when=10, amount_usd=Decimal("12.30"))
    second = replace(
        make_audit(run.run_id, when=11, tier=None, outcome="rejected:policy_denied"),
        amount_usd=None,
        output=None,
        idempotency_key=None,
        duration_ms=None,
        input={"nested": {"list": [1, "two", 3.5, None, False]}},
    )
    elsewhere = make_audit(other.run_id, when=10)

    await store.commit(run.run_id, epoch=0, audit=[first])
    await store.commit(other.run_id, epoch=0, audit=[elsewhere])
    await store.commit(run.run_id, epoch=0, audit=[second])

    records = await store.audit_records(run.run_id)
    assert records == [first, second]
    assert str(records[0].amount_usd) == "12.30"
    assert await store.audit_records(other.run_id) == [elsewhere]
    assert await store.audit_records(uuid4()) == []


async def test_autonomous_spend_sums_auto_ok_amounts_exactly_since_a_time(
    store: Store,
) -> None:
    run = await new_run(store, principal="alice")
    bob = await new_run(store, principal="bob")
    counted = [
        make_audit(run.run_id, when=100, amount_usd=Decimal("0.1")),
        make_audit(run.run_id, when=101, amount_usd=Decimal("0.2")),
        make_audit(run.run_id, when=102, amount_usd=Decimal("1234567890.000000001")),
        make_audit(run.run_id, when=50, amount_usd=Decimal("0.7")),  # exactly at `since`
        # a call that may have acted counts too
        make_audit(run.run_id, when=110, outcome="unknown", amount_usd=Decimal("2")),
    ]
    ignored = [
        make_audit(run.run_id, when=49.999999, amount_usd=Decimal("1000")),  # before since
        make_audit(run.run_id, when=103, tier="confirm", amount_usd=Decimal("1000")),
        make_audit(run.run_id, when=104, tier="explicit", amount_usd=Decimal("1000")),
        make_audit(run.run_id, when=105, tier=None, amount_usd=Decimal("1000")),
        make_audit(run.run_id, when=106, outcome="error", amount_usd=Decimal("1000")),
        make_audit(run.run_id, when=107, outcome="rejected:guard_blocked"),
        make_audit(run.run_id, when=108, outcome="pending"),
        make_audit(run.run_id, when=109, amount_usd=None),
    ]
    await store.commit(run.run_id, epoch=0, audit=[*counted, *ignored])
    await store.commit(bob.run_id, epoch=0, audit=[make_audit(bob.run_id, principal="bob")])

    spent = await store.autonomous_spend("alice", since=at(50))

    assert isinstance(spent, Decimal)
    assert spent == Decimal("1234567893.000000001")
    assert await store.autonomous_spend("alice", since=at(102.000001)) == Decimal("2")
    assert await store.autonomous_spend("bob", since=at(0)) == Decimal("0.10")
    assert await store.autonomous_spend("nobody", since=at(0)) == 0


# --- reservations of the daily autonomous spend ----------------------------------------------
D = Decimal


async def reserve(
    store: Store, key: str, amount: str, *, when: float = 10, who: str = "alice"
) -> bool:
    return await store.reserve_autonomous(
        who, D(amount), limit=D("100"), since=at(0), key=key, at=at(when)
    )


async def test_a_reservation_is_granted_up_to_the_limit_and_counts_as_spend(store: Store) -> None:
    assert await reserve(store, "k1", "60.005") is True
    assert await reserve(store, "k2", "39.995") is True  # exactly at the limit
    assert await reserve(store, "k3", "0.01") is False  # over: nothing reserved
    assert await store.autonomous_spend("alice", since=at(0)) == D("100.000")
    assert await store.autonomous_spend("alice", since=at(10.000001)) == 0  # before `since`
    assert await reserve(store, "k4", "50", who="bob") is True  # per principal
    assert await store.autonomous_spend("bob", since=at(0)) == D("50")


async def test_a_reservation_counts_with_committed_spend_and_once_per_key(store: Store) -> None:
    run = await new_run(store, principal="alice")
    await store.commit(run.run_id, epoch=0, audit=[make_audit(run.run_id, amount_usd=D("70"))])
    assert await reserve(store, "k1", "40") is False  # 70 committed + 40 > 100
    assert await reserve(store, "k1b", "30") is True
    # the same call again (a replay after a crash): granted, counted once
    assert await reserve(store, "k1b", "30") is True
    assert await store.autonomous_spend("alice", since=at(0)) == D("100")


async def test_a_reservation_becomes_its_audit_row_and_is_not_counted_twice(store: Store) -> None:
    run = await new_run(store, principal="alice")
    done = make_audit(run.run_id, amount_usd=D("30"), tool_use_id="toolu_done")
    failed = make_audit(run.run_id, amount_usd=D("20"), tool_use_id="toolu_failed")
    assert done.idempotency_key
    assert failed.idempotency_key
    assert await reserve(store, done.idempotency_key, "30") is True
    assert await reserve(store, failed.idempotency_key, "20") is True
    # the write that completed: its audit row counts instead of its reservation
    await store.commit(run.run_id, epoch=0, audit=[done])
    assert await store.autonomous_spend("alice", since=at(0)) == D("50")
    # one whose audit row does not count (an error) keeps counting until it is released
    await store.commit(run.run_id, epoch=0, audit=[replace(failed, outcome="error")])
    assert await store.autonomous_spend("alice", since=at(0)) == D("50")
    await store.release_autonomous(failed.idempotency_key)
    await store.release_autonomous("no such key")
    assert await store.autonomous_spend("alice", since=at(0)) == D("30")
    assert await reserve(store, "k2", "70") is True
    assert await reserve(store, "k3", "0.01") is False


async def test_concurrent_reservations_never_pass_the_limit(store: Store) -> None:
    granted = await asyncio.gather(*(reserve(store, f"k{i}", "7") for i in range(40)))
    assert granted.count(True) == 14  # 14 x 7 = 98; a 15th would pass 100
    assert await store.autonomous_spend("alice", since=at(0)) == D("98")


# --- live events ------------------------------------------------------------------------


async def test_subscribers_see_committed_events_only_in_order(store: Store) -> None:
    run = await new_run(store)
    other = await new_run(store)
    sub = store.subscribe(run.run_id)
    seen: list[tuple[int, int]] = []  # (seq received, last seq readable at that moment)

    async def listen() -> None:
        async for event in sub:
            readable = await store.read_events(run.run_id, after_seq=event.seq - 1, limit=1)
            seen.append((event.seq, readable[0].seq if readable else 0))

    listener = asyncio.create_task(listen())
    await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 2))
    with refused(ConflictError, f"run {run.run_id}: expected seq 4, got 9"):
        await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 9, 1))
    with refused(StaleEpochError, f"run {run.run_id}: epoch 7 is stale (now 0)"):
        await store.commit(run.run_id, epoch=7, events=deltas(run.run_id, 4, 1))
    await store.commit(other.run_id, epoch=0, events=deltas(other.run_id, 2, 1))
    await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 4, 3))
    sub.close()
    async with asyncio.timeout(TIMEOUT):
        await listener

    assert seen == [(2, 2), (3, 3), (4, 4), (5, 5), (6, 6)]


async def test_subscribers_see_only_events_after_they_subscribed(store: Store) -> None:
    run = await new_run(store)
    await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 2))
    first = store.subscribe(run.run_id)
    second = store.subscribe(run.run_id)

    later = deltas(run.run_id, 4, 2)
    await store.commit(run.run_id, epoch=0, events=later)

    assert await drain(first) == later
    assert await drain(second) == later


async def test_a_subscriber_that_falls_behind_is_closed_and_marked_overflowed(
    store: Store,
) -> None:
    run = await new_run(store)
    slow = store.subscribe(run.run_id, buffer=3)
    fast = store.subscribe(run.run_id, buffer=100)
    events = deltas(run.run_id, 2, 5)

    await store.commit(run.run_id, epoch=0, events=events)

    assert isinstance(slow, OverflowAware)
    assert isinstance(fast, OverflowAware)
    assert slow.overflowed is True
    async with asyncio.timeout(TIMEOUT):
        received = [event async for event in slow]  # ends by itself: it was closed
    assert received == events[:3]
    assert fast.overflowed is False
    assert await drain(fast) == events
    # The run itself was not slowed or refused: everything is stored.
    assert await store.read_events(run.run_id, after_seq=1) == events


async def test_close_ends_the_subscriptions(store: Store) -> None:
    run = await new_run(store)
    sub = store.subscribe(run.run_id)
    await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 1))

    await store.close()

    async with asyncio.timeout(TIMEOUT):
        received = [event async for event in sub]
    assert [e.seq for e in received] == [2]


# --- lifecycle --------------------------------------------------------------------------


async def test_a_closed_store_refuses_every_call(store: Store) -> None:
    run = await new_run(store)
    await store.close()
    await store.close()  # idempotent

    with refused(StoreError, "the store is closed"):
        await store.get_run(run.run_id)
    with refused(StoreError, "the store is closed"):
        await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 1))
    with refused(StoreError, "the store is closed"):
        await store.create_run(make_run())
    with refused(StoreError, "the store is closed"):
        await store.read_events(run.run_id)
    with refused(StoreError, "the store is closed"):
        await store.ledger_begin(make_ledger(run.run_id), epoch=0)


async def test_concurrent_commits_of_many_runs_all_land(store: Store) -> None:
    runs = [await new_run(store, created=i) for i in range(20)]

    await asyncio.gather(
        *(store.commit(r.run_id, epoch=0, events=deltas(r.run_id, 2, 3)) for r in runs)
    )

    for r in runs:
        assert [e.seq for e in await store.read_events(r.run_id)] == [1, 2, 3, 4]


async def test_two_commits_of_one_run_in_one_tick_apply_in_order(store: Store) -> None:
    run = await new_run(store)
    results = await asyncio.gather(
        store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 2)),
        store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 4, 2)),
        store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 4, 1)),  # now a duplicate
        return_exceptions=True,
    )

    assert results[0] is None
    assert results[1] is None
    assert isinstance(results[2], ConflictError)
    assert [e.seq for e in await store.read_events(run.run_id)] == [1, 2, 3, 4, 5]
