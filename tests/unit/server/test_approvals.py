"""Approvals from any client: bound to the exact arguments, decided once, by the right people."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest

from fiduciary import ManualClock
from fiduciary.capabilities import args_digest
from fiduciary.demo import Billing
from fiduciary.events import (
    ActionResolved,
    PendingAction,
    RunCompleted,
    ToolCallEnd,
    ToolCallRejected,
)
from fiduciary.server import Server
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import MemoryStore

from ..conftest import Effects
from .conftest import Keys, all_events, bearer, problem, settle, start_run

pytestmark = pytest.mark.timeout(30)


async def pending_of(client: httpx.AsyncClient, key: str, run_id: UUID) -> dict[str, Any]:
    response = await client.get(f"/approvals?run_id={run_id}", headers=bearer(key))
    assert response.status_code == 200, response.text
    (approval,) = response.json()["approvals"]
    assert isinstance(approval, dict)
    return approval


async def test_approve_from_another_client_and_the_run_finishes(
    app: Any, client: httpx.AsyncClient, keys: Keys, server: Server, billing: Billing
) -> None:
    run_id = await start_run(client, keys.alice, "Please pay my open bills")
    await settle(server)
    card = await pending_of(client, keys.alice, run_id)
    assert card["capability"] == "pay_invoice"
    assert card["args"] == {"invoice_id": "inv-102"}
    assert card["tier"] == "confirm"
    assert card["amount_usd"] == "42.50"
    assert card["description"] == "Pay invoice inv-102 (Mobile Co)"
    events = await all_events(client, keys.alice, run_id)
    shown = next(e for e in events if isinstance(e, PendingAction))
    assert card["args_digest"] == shown.args_digest
    # a second device (another client, another key of the same principal) decides
    from .conftest import client_for

    async with client_for(app) as phone:
        response = await phone.post(
            f"/approvals/{card['approval_id']}/approve",
            json={"args_digest": card["args_digest"]},
            headers=bearer(keys.alice),
        )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "approved"
    assert response.json()["decided_by"] == "alice"
    await settle(server)
    events = await all_events(client, keys.alice, run_id)
    assert isinstance(events[-1], RunCompleted)
    assert "inv-102: paid $42.50" in events[-1].text
    assert billing.balance == Decimal("73.50")
    assert (await client.get(f"/approvals?run_id={run_id}", headers=bearer(keys.alice))).json() == {
        "approvals": []
    }
    decided = await client.get(
        f"/approvals?run_id={run_id}&status=approved", headers=bearer(keys.alice)
    )
    assert [a["approval_id"] for a in decided.json()["approvals"]] == [card["approval_id"]]


async def test_a_forged_approval_is_refused(
    client: httpx.AsyncClient, keys: Keys, server: Server, billing: Billing
) -> None:
    run_id = await start_run(client, keys.alice, "Please pay my open bills")
    await settle(server)
    card = await pending_of(client, keys.alice, run_id)
    url = f"/approvals/{card['approval_id']}/approve"
    # another principal: the approval does not exist for them
    problem(
        await client.post(url, json={"args_digest": card["args_digest"]}, headers=bearer(keys.bob)),
        404,
        "not_found",
    )
    problem(
        await client.get(f"/approvals/{card['approval_id']}", headers=bearer(keys.bob)),
        404,
        "not_found",
    )
    # the right principal without the scope to decide
    problem(
        await client.post(
            url, json={"args_digest": card["args_digest"]}, headers=bearer(keys.alice_writer)
        ),
        403,
        "insufficient_scope",
    )
    # arguments other than the ones shown
    problem(
        await client.post(url, json={"args_digest": "0" * 64}, headers=bearer(keys.alice)),
        409,
        "digest_mismatch",
    )
    # no digest at all: a decision must name what it approves
    problem(await client.post(url, json={}, headers=bearer(keys.alice)), 422, "invalid_request")
    # an approval that does not exist
    problem(
        await client.post(
            f"/approvals/{uuid4()}/approve",
            json={"args_digest": "0" * 64},
            headers=bearer(keys.alice),
        ),
        404,
        "not_found",
    )
    # a field that is not modifiable
    problem(
        await client.post(
            url,
            json={"args_digest": card["args_digest"], "edits": {"invoice_id": "inv-101"}},
            headers=bearer(keys.alice),
        ),
        422,
        "field_not_modifiable",
    )
    # a self-approval smuggled in the message changes nothing: still pending, nothing paid
    assert (
        await client.get(f"/approvals/{card['approval_id']}", headers=bearer(keys.alice))
    ).json()["status"] == "pending"
    assert billing.balance == Decimal("116.00")


async def test_a_replayed_or_double_approval_is_answered_once(
    client: httpx.AsyncClient, keys: Keys, server: Server, billing: Billing
) -> None:
    run_id = await start_run(client, keys.alice, "Please pay my open bills")
    await settle(server)
    card = await pending_of(client, keys.alice, run_id)
    url = f"/approvals/{card['approval_id']}/approve"
    body = {"args_digest": card["args_digest"]}
    responses = await asyncio.gather(
        *(client.post(url, json=body, headers=bearer(keys.alice)) for _ in range(5))
    )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200, 409, 409, 409, 409]
    for r in responses:
        if r.status_code == 409:
            problem(r, 409, "already_decided")
    await settle(server)
    replay = await client.post(url, json=body, headers=bearer(keys.alice))
    problem(replay, 409, "already_decided")
    denial = await client.post(
        f"/approvals/{card['approval_id']}/deny", json={}, headers=bearer(keys.alice)
    )
    problem(denial, 409, "already_decided")
    await settle(server)
    events = await all_events(client, keys.alice, run_id)
    assert sum(isinstance(e, ActionResolved) for e in events) == 1
    paid = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "pay_invoice"]
    assert len(paid) == 2  # inv-101 automatically, inv-102 once
    assert billing.balance == Decimal("73.50")


async def test_an_expired_approval_is_refused_and_the_run_is_told(
    client: httpx.AsyncClient, keys: Keys, server: Server, clock: ManualClock, billing: Billing
) -> None:
    run_id = await start_run(client, keys.alice, "Please pay my open bills")
    await settle(server)
    card = await pending_of(client, keys.alice, run_id)
    clock.advance(901)
    response = await client.post(
        f"/approvals/{card['approval_id']}/approve",
        json={"args_digest": card["args_digest"]},
        headers=bearer(keys.alice),
    )
    problem(response, 410, "expired")
    await settle(server)
    events = await all_events(client, keys.alice, run_id)
    rejected = [e for e in events if isinstance(e, ToolCallRejected)]
    assert [r.reason for r in rejected] == ["expired"]
    assert isinstance(events[-1], RunCompleted)
    assert billing.balance == Decimal("116.00")


async def test_deny_with_a_reason(
    client: httpx.AsyncClient, keys: Keys, server: Server, billing: Billing
) -> None:
    run_id = await start_run(client, keys.alice, "Please pay my open bills")
    await settle(server)
    card = await pending_of(client, keys.alice, run_id)
    response = await client.post(
        f"/approvals/{card['approval_id']}/deny",
        json={"reason": "not this month"},
        headers=bearer(keys.alice),
    )
    assert response.status_code == 200
    assert response.json()["status"] == "denied"
    assert response.json()["reason"] == "not this month"
    await settle(server)
    events = await all_events(client, keys.alice, run_id)
    assert any(isinstance(e, ToolCallRejected) and e.reason == "denied" for e in events)
    assert isinstance(events[-1], RunCompleted)
    assert billing.balance == Decimal("116.00")


async def test_edits_and_the_explicit_tier(
    client: httpx.AsyncClient, keys: Keys, server: Server, effects: Effects
) -> None:
    run_id = await start_run(client, keys.alice, "send 60 to bob")
    await settle(server)
    card = await pending_of(client, keys.alice, run_id)
    assert card["modifiable_fields"] == ["amount", "memo"]
    url = f"/approvals/{card['approval_id']}/approve"
    # raising the amount to 300 makes the action explicit: the amount must be re-typed
    edits = {"amount": "300"}
    problem(
        await client.post(
            url,
            json={"args_digest": card["args_digest"], "edits": edits},
            headers=bearer(keys.alice),
        ),
        422,
        "acknowledgement_required",
    )
    problem(
        await client.post(
            url,
            json={"args_digest": card["args_digest"], "edits": {"amount": "lots"}},
            headers=bearer(keys.alice),
        ),
        422,
        "invalid_edit",
    )
    response = await client.post(
        url,
        json={"args_digest": card["args_digest"], "edits": {"amount": "50"}},
        headers=bearer(keys.alice),
    )
    assert response.status_code == 200, response.text
    assert response.json()["args"]["amount"] == "50"
    await settle(server)
    assert [p["amount"] for p in effects.payments] == [Decimal("50")]
    events = await all_events(client, keys.alice, run_id)
    resolved = next(e for e in events if isinstance(e, ActionResolved))
    assert resolved.edits == {"amount": "50"}

    big = await start_run(client, keys.alice, "send 500 to bob")
    await settle(server)
    card = await pending_of(client, keys.alice, big)
    assert card["tier"] == "explicit"
    url = f"/approvals/{card['approval_id']}/approve"
    problem(
        await client.post(
            url, json={"args_digest": card["args_digest"]}, headers=bearer(keys.alice)
        ),
        422,
        "acknowledgement_required",
    )
    problem(
        await client.post(
            url,
            json={"args_digest": card["args_digest"], "confirm_amount": "50"},
            headers=bearer(keys.alice),
        ),
        422,
        "acknowledgement_required",
    )
    ok = await client.post(
        url,
        json={"args_digest": card["args_digest"], "confirm_amount": "$500.00"},
        headers=bearer(keys.alice),
    )
    assert ok.status_code == 200, ok.text
    await settle(server)
    assert [p["amount"] for p in effects.payments] == [Decimal("50"), Decimal("500")]


async def test_admin_decides_for_anyone_and_is_recorded(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "Please pay my open bills")
    await settle(server)
    listed = (await client.get("/approvals", headers=bearer(keys.admin))).json()["approvals"]
    assert [a["run_id"] for a in listed] == [str(run_id)]
    assert (await client.get("/approvals", headers=bearer(keys.bob))).json() == {"approvals": []}
    card = listed[0]
    response = await client.post(
        f"/approvals/{card['approval_id']}/deny", json={"reason": "ops"}, headers=bearer(keys.admin)
    )
    assert response.status_code == 200
    assert response.json()["decided_by"] == "ops"


async def test_client_executed_action_result(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "sign this")
    await settle(server)
    run = (await client.get(f"/runs/{run_id}", headers=bearer(keys.alice))).json()
    assert run["status"] == "awaiting_client_result"
    card = await pending_of(client, keys.alice, run_id)
    assert card["executor"] == "client"
    problem(
        await client.post(
            f"/approvals/{card['approval_id']}/approve",
            json={"args_digest": card["args_digest"]},
            headers=bearer(keys.alice),
        ),
        409,
        "client_executed",
    )
    problem(
        await client.post(
            f"/approvals/{card['approval_id']}/result",
            json={"result": {"x": 1}},
            headers=bearer(keys.bob),
        ),
        404,
        "not_found",
    )
    response = await client.post(
        f"/approvals/{card['approval_id']}/result",
        json={"result": {"digest": "0xabc"}},
        headers=bearer(keys.alice),
    )
    assert response.status_code == 200, response.text
    await settle(server)
    events = await all_events(client, keys.alice, run_id)
    end = next(e for e in events if isinstance(e, ToolCallEnd))
    assert json.loads(end.output) == {"digest": "0xabc"}
    assert isinstance(events[-1], RunCompleted)
    # the server performs pay_invoice: a result cannot be submitted for it
    other = await start_run(client, keys.alice, "Please pay my open bills")
    await settle(server)
    card = await pending_of(client, keys.alice, other)
    problem(
        await client.post(
            f"/approvals/{card['approval_id']}/result",
            json={"result": {}},
            headers=bearer(keys.alice),
        ),
        409,
        "not_client_executed",
    )


async def test_every_decision_error_is_a_4xx_problem(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "send 500 to bob")
    await settle(server)
    card = await pending_of(client, keys.alice, run_id)
    url = f"/approvals/{card['approval_id']}/approve"
    for typed in ("1e30", "1e999", "NaN", "-Infinity"):
        problem(
            await client.post(
                url,
                json={"args_digest": card["args_digest"], "confirm_amount": typed},
                headers=bearer(keys.alice),
            ),
            422,
            "acknowledgement_required",
        )
    problem(
        await client.post(
            url,
            json={
                "args_digest": card["args_digest"],
                "edits": {"amount": "1e999"},
                "confirm_amount": "500",
            },
            headers=bearer(keys.alice),
        ),
        422,
        "invalid_edit",
    )


async def test_a_rewritten_approval_row_is_a_409_problem(
    client: httpx.AsyncClient, keys: Keys, server: Server, store: Store, effects: Effects
) -> None:
    run_id = await start_run(client, keys.alice, "send 60 to bob")
    await settle(server)
    card = await pending_of(client, keys.alice, run_id)
    evil = {**card["args"], "to": "mallory"}
    record = await store.get_approval(UUID(card["approval_id"]))
    assert record is not None
    if isinstance(store, SQLiteStore):  # the file rewritten behind the store
        with sqlite3.connect(store.path) as conn:
            conn.execute(
                "UPDATE approvals SET args = ?, args_digest = ? WHERE approval_id = ?",
                (json.dumps(evil), args_digest(evil), card["approval_id"]),
            )
    else:
        assert isinstance(store, MemoryStore)
        rewritten = record.with_(args=evil, args_digest=args_digest(evil))
        store._approvals[record.approval_id] = rewritten
    # the console now shows the rewritten row; approving it is refused all the same
    shown = await pending_of(client, keys.alice, run_id)
    assert shown["args"]["to"] == "mallory"
    problem(
        await client.post(
            f"/approvals/{card['approval_id']}/approve",
            json={"args_digest": shown["args_digest"]},
            headers=bearer(keys.alice),
        ),
        409,
        "tampered",
    )
    await settle(server)
    assert effects.payments == []
