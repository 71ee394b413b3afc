"""Dual control over the HTTP API: the card shows "1 of 2 approved", the proposer is refused
with the reason, any member's deny denies, the action runs once at the N-th approval."""

from __future__ import annotations

from decimal import Decimal
from uuid import UUID

import httpx
import pytest

from fiduciary import ManualClock
from fiduciary.events import RunCompleted
from fiduciary.server import Server

from ..conftest import Effects
from .conftest import Keys, all_events, bearer, problem, settle, start_run
from .dual_support import agent, card, carol

pytestmark = pytest.mark.timeout(30)

__all__ = ["agent", "carol"]  # the fixtures (dual_support)


async def pending_send(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> tuple[UUID, str, str]:
    run_id = await start_run(client, keys.alice, "send 60")
    await settle(server)
    response = await client.get(f"/approvals?run_id={run_id}", headers=bearer(keys.alice))
    (approval,) = response.json()["approvals"]
    return run_id, str(approval["approval_id"]), str(approval["args_digest"])


async def test_the_proposer_is_refused_with_the_reason_and_nothing_changes(
    client: httpx.AsyncClient, keys: Keys, server: Server, effects: Effects, carol: str
) -> None:
    _run_id, approval_id, digest = await pending_send(client, keys, server)
    response = await client.post(
        f"/approvals/{approval_id}/approve",
        json={"args_digest": digest},
        headers=bearer(keys.alice),
    )
    body = problem(response, 403, "separation_of_duties")
    assert body["detail"] == (
        "the proposer of an action cannot approve it: it needs 2 approvers of finance"
    )
    shown = await card(client, carol, approval_id)
    assert shown["status"] == "pending"
    assert shown["dual_control"]["progress"] == "0 of 2 approved"
    assert shown["dual_control"]["members"] == ["alice", "bob", "carol"]
    await settle(server)
    assert effects.payments == []


async def test_two_of_three_resume_the_run_once(
    client: httpx.AsyncClient,
    keys: Keys,
    server: Server,
    effects: Effects,
    carol: str,
    clock: ManualClock,
) -> None:
    run_id, approval_id, digest = await pending_send(client, keys, server)
    first = await client.post(
        f"/approvals/{approval_id}/approve", json={"args_digest": digest}, headers=bearer(keys.bob)
    )
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "pending"
    at = clock.now()
    assert first.json()["dual_control"]["progress"] == f"1 of 2 approved (bob, {at:%H:%M})"
    # everyone in the group, the proposer too, sees the same progress on the card
    for key in (keys.alice, carol):
        assert (await card(client, key, approval_id))["dual_control"]["progress"] == (
            f"1 of 2 approved (bob, {at:%H:%M})"
        )
    again = await client.post(
        f"/approvals/{approval_id}/approve", json={"args_digest": digest}, headers=bearer(keys.bob)
    )
    problem(again, 409, "already_voted")
    await settle(server)
    assert effects.payments == []
    second = await client.post(
        f"/approvals/{approval_id}/approve", json={"args_digest": digest}, headers=bearer(carol)
    )
    assert second.status_code == 200, second.text
    assert second.json()["status"] == "approved"
    assert second.json()["decided_by"] == "bob, carol"
    await settle(server)
    assert [p["amount"] for p in effects.payments] == [Decimal("60")]
    events = await all_events(client, keys.alice, run_id)
    assert isinstance(events[-1], RunCompleted)


async def test_a_deny_after_one_approval_denies(
    client: httpx.AsyncClient, keys: Keys, server: Server, effects: Effects, carol: str
) -> None:
    run_id, approval_id, digest = await pending_send(client, keys, server)
    ok = await client.post(
        f"/approvals/{approval_id}/approve", json={"args_digest": digest}, headers=bearer(keys.bob)
    )
    assert ok.status_code == 200, ok.text
    denied = await client.post(
        f"/approvals/{approval_id}/deny", json={"reason": "no"}, headers=bearer(carol)
    )
    assert denied.status_code == 200, denied.text
    assert denied.json()["status"] == "denied"
    late = await client.post(
        f"/approvals/{approval_id}/approve", json={"args_digest": digest}, headers=bearer(carol)
    )
    problem(late, 409, "already_decided")
    await settle(server)
    assert effects.payments == []
    events = await all_events(client, keys.alice, run_id)
    assert isinstance(events[-1], RunCompleted)


async def test_someone_outside_the_group_does_not_see_the_approval(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    _, approval_id, digest = await pending_send(client, keys, server)
    dave, _ = await keys.store.create("dave", ["runs:read", "approvals:decide"])
    response = await client.post(
        f"/approvals/{approval_id}/approve", json={"args_digest": digest}, headers=bearer(dave)
    )
    problem(response, 404, "not_found")


async def test_a_member_lists_what_waits_for_its_vote(
    client: httpx.AsyncClient, keys: Keys, server: Server, carol: str
) -> None:
    _, approval_id, _ = await pending_send(client, keys, server)
    listed = await client.get("/approvals", headers=bearer(carol))
    assert listed.status_code == 200, listed.text
    (shown,) = listed.json()["approvals"]
    assert shown["approval_id"] == approval_id
    assert shown["dual_control"]["progress"] == "0 of 2 approved"
    dave, _ = await keys.store.create("dave", ["runs:read", "approvals:decide"])
    assert (await client.get("/approvals", headers=bearer(dave))).json() == {"approvals": []}
