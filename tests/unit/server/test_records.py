"""``GET /audit`` and ``GET /ledger`` over HTTP: principal-scoped (a key never reads another
principal's rows; an admin reads everyone's), filtered, validated, and in /openapi.json."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import httpx
import pytest

from fiduciary import ManualClock
from fiduciary.server import Server

from .conftest import Keys, bearer, problem, settle, start_run

pytestmark = pytest.mark.timeout(30)


async def _send(client: httpx.AsyncClient, server: Server, key: str, message: str) -> UUID:
    """A run whose transfer waits for a person, approved over HTTP and executed."""
    run_id = await start_run(client, key, message)
    await settle(server)
    response = await client.get(f"/approvals?run_id={run_id}", headers=bearer(key))
    (pending,) = response.json()["approvals"]
    decided = await client.post(
        f"/approvals/{pending['approval_id']}/approve",
        json={"args_digest": pending["args_digest"]},
        headers=bearer(key),
    )
    assert decided.status_code == 200, decided.text
    await settle(server)
    return run_id


async def _rows(client: httpx.AsyncClient, path: str, key: str, **query: str) -> Any:
    response = await client.get(path, params=query, headers=bearer(key))
    assert response.status_code == 200, response.text
    return response.json()


async def test_audit_and_ledger_are_scoped_to_the_callers_principal(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    alices = await _send(client, server, keys.alice, "send 60")
    bobs = await _send(client, server, keys.bob, "send 60")

    mine = (await _rows(client, "/audit", keys.alice))["audit"]
    assert {r["run_id"] for r in mine} == {str(alices)}
    assert [(r["capability"], r["outcome"]) for r in mine] == [("send", "ok"), ("send", "pending")]
    assert {r["principal"] for r in mine} == {"alice"}
    assert mine[0]["amount_usd"] == "60"  # a decimal string, never a float
    assert mine[0]["input"] == {"to": "bob", "amount": "60", "memo": ""}
    ledger = (await _rows(client, "/ledger", keys.alice))["ledger"]
    assert [(r["run_id"], r["principal"], r["status"]) for r in ledger] == [
        (str(alices), "alice", "done")
    ]
    assert ledger[0]["result"]["sent"] == "60"
    assert ledger[0]["key"] == mine[0]["idempotency_key"]

    # bob's key reads bob's rows only; a reader key of alice reads alice's
    theirs = (await _rows(client, "/audit", keys.bob))["audit"]
    assert {r["run_id"] for r in theirs} == {str(bobs)}
    assert {r["run_id"] for r in (await _rows(client, "/ledger", keys.bob))["ledger"]} == {
        str(bobs)
    }
    assert (await _rows(client, "/audit", keys.alice_reader))["audit"] == mine
    # naming another principal's run or principal finds nothing of it, or is refused
    assert (await _rows(client, "/audit", keys.alice, run_id=str(bobs)))["audit"] == []
    assert (await _rows(client, "/ledger", keys.alice, run_id=str(bobs)))["ledger"] == []
    for path in ("/audit", "/ledger"):
        refused = problem(
            await client.get(path, params={"principal": "bob"}, headers=bearer(keys.alice)),
            403,
            "insufficient_scope",
        )
        assert refused["detail"] == "only an admin key reads another principal's rows"
        problem(await client.get(path), 401, "unauthenticated")
    # naming oneself is allowed
    assert (await _rows(client, "/audit", keys.alice, principal="alice"))["audit"] == mine

    # an admin reads everyone's, or one principal's
    everyone = (await _rows(client, "/audit", keys.admin))["audit"]
    assert {r["run_id"] for r in everyone} == {str(alices), str(bobs)}
    only_bob = (await _rows(client, "/ledger", keys.admin, principal="bob"))["ledger"]
    assert [r["run_id"] for r in only_bob] == [str(bobs)]


async def test_audit_filters_by_run_capability_time_and_limit(
    client: httpx.AsyncClient, keys: Keys, server: Server, clock: ManualClock
) -> None:
    first = await _send(client, server, keys.alice, "send 60")
    clock.advance(3600)
    middle = clock.now()
    second = await _send(client, server, keys.alice, "send 60")

    by_run = (await _rows(client, "/audit", keys.alice, run_id=str(first)))["audit"]
    assert {r["run_id"] for r in by_run} == {str(first)}
    assert len(by_run) == 2
    later = (await _rows(client, "/audit", keys.alice, since=middle.isoformat()))["audit"]
    assert {r["run_id"] for r in later} == {str(second)}
    earlier = (await _rows(client, "/ledger", keys.alice, until=middle.isoformat()))["ledger"]
    assert [r["run_id"] for r in earlier] == [str(first)]
    # "+00:00" unencoded in a URL arrives as " 00:00": read as meant
    raw = f"/audit?since={middle.isoformat()}"
    assert "+00:00" in raw
    plus = await client.get(raw, headers=bearer(keys.alice))
    assert {r["run_id"] for r in plus.json()["audit"]} == {str(second)}
    assert (await _rows(client, "/audit", keys.alice, capability="balance"))["audit"] == []
    newest = (await _rows(client, "/audit", keys.alice, limit="1"))["audit"]
    assert [(r["run_id"], r["outcome"]) for r in newest] == [(str(second), "ok")]

    for query in ({"since": "2026-03-01"}, {"limit": "0"}, {"run_id": "nope"}):
        problem(
            await client.get("/audit", params=query, headers=bearer(keys.alice)),
            422,
            "invalid_request",
        )


async def test_audit_and_ledger_are_in_the_openapi_document(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    for path, operation_id, listed in (
        ("/audit", "listAudit", "AuditList"),
        ("/ledger", "listLedger", "LedgerList"),
    ):
        operation = document["paths"][path]["get"]
        assert operation["operationId"] == operation_id
        assert operation["x-fiduciary-scope"] == "runs:read"
        assert {p["name"] for p in operation["parameters"]} == {
            "run_id",
            "principal",
            "capability",
            "since",
            "until",
            "limit",
        }
        schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{listed}"}
        assert "403" in operation["responses"]


async def test_a_time_out_of_range_or_a_nul_is_refused_not_a_server_error(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    for query in (
        {"until": "9999-12-31T23:00:00-05:00"},
        {"since": "0001-01-01T00:30:00+01:00"},
        {"capability": "send\x00"},
    ):
        for path in ("/audit", "/ledger"):
            problem(
                await client.get(path, params=query, headers=bearer(keys.admin)),
                422,
                "invalid_request",
            )
