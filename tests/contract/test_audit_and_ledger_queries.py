"""``Audit.find_audit`` and ``Ledger.find_ledger`` (``RecordQuery``) on every store: each filter
(run, principal, capability, time range with ``since`` included and ``until`` excluded),
newest first, the limit, and a ledger row's principal read from its run."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta, timezone
from decimal import Decimal
from uuid import uuid4

import pytest

from fiduciary.stores.base import AuditRecord, LedgerEntry, RecordQuery, Store

from .builders import at, make_audit, make_ledger, make_run, started


async def test_find_audit_filters_each_way_newest_first(store: Store) -> None:
    alice = make_run(principal="alice")
    bob = make_run(principal="bob")
    for run in (alice, bob):
        await store.create_run(run, [started(run.run_id, principal=run.principal)])
    a1 = make_audit(alice.run_id, when=10, tool_use_id="toolu_a1")
    a2 = replace(
        make_audit(alice.run_id, when=20, tool_use_id="toolu_a2", outcome="rejected:unauthorized"),
        capability="balance",
        kind="read",
        amount_usd=None,
    )
    a3 = make_audit(alice.run_id, when=30, tool_use_id="toolu_a3", amount_usd=Decimal("12.30"))
    b1 = make_audit(bob.run_id, principal="bob", when=15, tool_use_id="toolu_b1")
    await store.commit(alice.run_id, epoch=0, audit=[a1, a2])
    await store.commit(bob.run_id, epoch=0, audit=[b1])
    await store.commit(alice.run_id, epoch=0, audit=[a3])

    assert await store.find_audit(RecordQuery()) == [a3, a2, b1, a1]
    assert await store.find_audit(RecordQuery(principal="alice")) == [a3, a2, a1]
    assert await store.find_audit(RecordQuery(principal="bob")) == [b1]
    assert await store.find_audit(RecordQuery(principal="carol")) == []
    assert await store.find_audit(RecordQuery(run_id=bob.run_id)) == [b1]
    assert await store.find_audit(RecordQuery(run_id=uuid4())) == []
    assert await store.find_audit(RecordQuery(capability="balance")) == [a2]
    assert await store.find_audit(RecordQuery(capability="send", principal="alice")) == [a3, a1]
    # since is included, until is not
    assert await store.find_audit(RecordQuery(since=at(15))) == [a3, a2, b1]
    assert await store.find_audit(RecordQuery(until=at(20))) == [b1, a1]
    assert await store.find_audit(RecordQuery(since=at(15), until=at(30))) == [a2, b1]
    # a time in another zone is the same instant
    plus_two = timezone(timedelta(hours=2))
    assert await store.find_audit(RecordQuery(since=at(20).astimezone(plus_two))) == [a3, a2]
    assert await store.find_audit(RecordQuery(limit=2)) == [a3, a2]
    found = (await store.find_audit(RecordQuery(run_id=alice.run_id, since=at(30))))[0]
    assert str(found.amount_usd) == "12.30"  # exact, never a float


async def test_find_audit_keeps_the_write_order_of_rows_at_the_same_time(store: Store) -> None:
    run = make_run()
    await store.create_run(run, [started(run.run_id)])
    rows: list[AuditRecord] = [
        make_audit(run.run_id, when=10, tool_use_id=f"toolu_{i}") for i in range(4)
    ]
    await store.commit(run.run_id, epoch=0, audit=rows[:2])
    await store.commit(run.run_id, epoch=0, audit=rows[2:])
    assert await store.find_audit(RecordQuery(run_id=run.run_id)) == rows[::-1]


async def test_find_ledger_filters_each_way_with_the_runs_principal(store: Store) -> None:
    alice = make_run(principal="alice")
    bob = make_run(principal="bob")
    for run in (alice, bob):
        await store.create_run(run, [started(run.run_id, principal=run.principal)])
    sent = make_ledger(alice.run_id, key="k-sent")
    ordered = replace(
        make_ledger(alice.run_id, key="k-order", capability="place_order"), started_at=at(40)
    )
    bobs = replace(make_ledger(bob.run_id, key="k-bob"), started_at=at(30))
    for entry in (sent, ordered, bobs):
        assert await store.ledger_begin(entry, epoch=0) is None
    await store.ledger_finish("k-sent", status="done", at=at(21), result={"sent": "1.00"})
    done: LedgerEntry = replace(sent, status="done", finished_at=at(21), result={"sent": "1.00"})

    everything = await store.find_ledger(RecordQuery())
    assert [(r.principal, r.entry) for r in everything] == [
        ("alice", ordered),
        ("bob", bobs),
        ("alice", done),
    ]
    assert [r.entry.key for r in await store.find_ledger(RecordQuery(principal="alice"))] == [
        "k-order",
        "k-sent",
    ]
    assert [r.entry.key for r in await store.find_ledger(RecordQuery(principal="bob"))] == ["k-bob"]
    assert await store.find_ledger(RecordQuery(principal="carol")) == []
    by_run = await store.find_ledger(RecordQuery(run_id=bob.run_id))
    assert [r.entry.key for r in by_run] == ["k-bob"]
    by_capability = await store.find_ledger(RecordQuery(capability="place_order"))
    assert [r.entry.key for r in by_capability] == ["k-order"]
    # over started_at: since included, until excluded
    ranged = await store.find_ledger(RecordQuery(since=at(20), until=at(40)))
    assert [r.entry.key for r in ranged] == ["k-bob", "k-sent"]
    assert [r.entry.key for r in await store.find_ledger(RecordQuery(limit=1))] == ["k-order"]


def test_a_record_query_refuses_a_naive_time_and_a_limit_below_one() -> None:
    with pytest.raises(ValueError, match="since must be timezone-aware"):
        RecordQuery(since=at(0).replace(tzinfo=None))
    with pytest.raises(ValueError, match="until must be timezone-aware"):
        RecordQuery(until=at(0).replace(tzinfo=None))
    with pytest.raises(ValueError, match="limit must be at least 1"):
        RecordQuery(limit=0)
