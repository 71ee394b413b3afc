"""Every store keeps a run waiting for the run it delegated to (status ``awaiting_child``):
created or committed with it, listed by it, and never listed to resume on its own (a child's
end moves it: fiduciary.delegation), lease or no lease."""

from __future__ import annotations

from fiduciary.events import UserMessage
from fiduciary.stores.base import Store

from .builders import at, make_run, started


async def test_a_run_waiting_for_its_child_is_kept_and_not_listed_to_resume(store: Store) -> None:
    created = make_run(created=1, status="awaiting_child")
    await store.create_run(created, [started(created.run_id)])
    committed = make_run(created=2)
    await store.create_run(committed, [started(committed.run_id)])
    lease = await store.acquire(committed.run_id, owner="w1", now=at(0), ttl_seconds=60)
    assert lease is not None
    text = UserMessage(run_id=committed.run_id, seq=2, at=at(1), text="settle my invoice")
    await store.commit(
        committed.run_id, epoch=lease.epoch, events=[text], status="awaiting_child", release=True
    )

    stored = await store.get_run(committed.run_id)
    assert stored is not None
    assert stored.status == "awaiting_child"
    assert stored.lease_owner is None
    assert (await store.get_run(created.run_id)) == created.with_(last_seq=1)
    listed = await store.list_runs(status="awaiting_child")
    assert sorted(r.run_id for r in listed) == sorted([created.run_id, committed.run_id])
    assert await store.runs_to_resume(now=at(100)) == []
