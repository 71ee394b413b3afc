"""An approval ends superseded (its call made anew: ``Agent.regenerate``) on every store: the
status is kept, only a pending row can take it, and the run is woken to make the new card."""

from __future__ import annotations

from fiduciary.stores.base import Store

from .builders import at, make_approval, make_run, started


async def test_a_pending_approval_can_end_superseded_and_wakes_its_run(store: Store) -> None:
    run = make_run()
    await store.create_run(run, [started(run.run_id)])
    approval = make_approval(run.run_id)
    await store.commit(run.run_id, epoch=0, status="awaiting_approval", approvals=[approval])
    superseded = approval.with_(status="superseded", decided_by="alice", decided_at=at(30))
    assert await store.decide_approval(superseded) is True
    assert await store.decide_approval(superseded.with_(status="approved")) is False
    stored = await store.get_approval(approval.approval_id)
    assert stored is not None
    assert (stored.status, stored.decided_by) == ("superseded", "alice")
    assert [a.approval_id for a in await store.list_approvals(status="superseded")] == [
        approval.approval_id
    ]
    await store.release(run.run_id, epoch=0)
    woken = await store.runs_to_resume(now=at(31))
    assert run.run_id in [r.run_id for r in woken]
