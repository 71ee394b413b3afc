"""Runs over HTTP: start, follow, read, list, continue; tenancy and errors."""

from __future__ import annotations

from uuid import uuid4

import anyio
import httpx
import pytest

from fiduciary.events import PendingAction, RunCompleted, RunStarted, UserMessage
from fiduciary.server import Server

from .conftest import LONG_TEXT, Keys, all_events, bearer, problem, settle, start_run

pytestmark = pytest.mark.timeout(30)


async def test_a_run_starts_at_once_and_goes_on_in_the_background(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    with anyio.fail_after(5):
        response = await client.post(
            "/runs", json={"message": "Please pay my open bills"}, headers=bearer(keys.alice)
        )
        assert response.status_code == 202
        body = response.json()
        run_id = body["run_id"]
        assert body["first_seq"] == 1
        assert body["events_url"] == f"/runs/{run_id}/events?after=0"
        assert response.headers["location"] == f"/runs/{run_id}"
        await settle(server)
        run = (await client.get(f"/runs/{run_id}", headers=bearer(keys.alice))).json()
        assert run["status"] == "awaiting_approval"
        assert run["principal"] == "alice"
        events = await all_events(client, keys.alice, run_id)
    assert [e.seq for e in events] == list(range(1, run["last_seq"] + 1))
    assert isinstance(events[0], RunStarted)
    assert events[0].principal == "alice"
    assert isinstance(events[1], UserMessage)
    assert isinstance(events[-1], PendingAction)


async def test_list_runs_shows_only_the_callers_runs_and_admin_sees_all(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    a = await start_run(client, keys.alice, "hello there")
    b = await start_run(client, keys.bob, "hello from bob")
    await settle(server)
    mine = (await client.get("/runs", headers=bearer(keys.alice))).json()["runs"]
    assert [r["run_id"] for r in mine] == [str(a)]
    everyone = (await client.get("/runs", headers=bearer(keys.admin))).json()["runs"]
    assert {r["run_id"] for r in everyone} == {str(a), str(b)}
    done = (await client.get("/runs?status=completed&limit=1", headers=bearer(keys.admin))).json()
    assert len(done["runs"]) == 1
    problem(await client.get("/runs?limit=0", headers=bearer(keys.alice)), 422, "invalid_request")
    problem(
        await client.get("/runs?status=sleeping", headers=bearer(keys.alice)),
        422,
        "invalid_request",
    )


async def test_another_principals_run_does_not_exist_for_you(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "hello there")
    await settle(server)
    for method, path, body in [
        ("GET", f"/runs/{run_id}", None),
        ("GET", f"/runs/{run_id}/events?follow=false", None),
        ("POST", f"/runs/{run_id}/messages", {"message": "mine now"}),
        ("POST", f"/runs/{run_id}/cancel", None),
    ]:
        response = await client.request(method, path, json=body, headers=bearer(keys.bob))
        problem(response, 404, "not_found")
    admin = await client.get(f"/runs/{run_id}", headers=bearer(keys.admin))
    assert admin.status_code == 200


async def test_a_finished_run_continues_with_a_new_message(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "hello there")
    await settle(server)
    first = await all_events(client, keys.alice, run_id)
    assert isinstance(first[-1], RunCompleted)
    assert first[-1].text == LONG_TEXT
    response = await client.post(
        f"/runs/{run_id}/messages", json={"message": "and again"}, headers=bearer(keys.alice)
    )
    assert response.status_code == 202, response.text
    assert response.json()["first_seq"] == len(first) + 1
    await settle(server)
    events = await all_events(client, keys.alice, run_id)
    assert isinstance(events[len(first)], UserMessage)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_message_to_a_run_waiting_for_a_decision_is_refused(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "Please pay my open bills")
    await settle(server)
    response = await client.post(
        f"/runs/{run_id}/messages", json={"message": "more"}, headers=bearer(keys.alice)
    )
    problem(response, 409, "run_state")


async def test_bad_requests_are_problems(client: httpx.AsyncClient, keys: Keys) -> None:
    h = bearer(keys.alice)
    problem(
        await client.post("/runs", content=b"{", headers={**h, "content-type": "application/json"}),
        400,
        "invalid_json",
    )
    problem(
        await client.post(
            "/runs", content=b"message=hi", headers={**h, "content-type": "text/plain"}
        ),
        415,
        "unsupported_media_type",
    )
    body = problem(
        await client.post("/runs", json={"message": ""}, headers=h), 422, "invalid_request"
    )
    assert body["errors"][0]["loc"] == ["message"]
    problem(
        await client.post("/runs", json={"message": "hi", "extra": 1}, headers=h),
        422,
        "invalid_request",
    )
    problem(await client.post("/runs", json=["hi"], headers=h), 422, "invalid_request")
    problem(
        await client.post("/runs", json={"message": "x" * 70_000}, headers=h),
        413,
        "payload_too_large",
    )
    problem(
        await client.post("/runs", json={"message": "hi", "capabilities": ["teleport"]}, headers=h),
        422,
        "invalid_request",
    )
    problem(await client.get(f"/runs/{uuid4()}", headers=h), 404, "not_found")
    problem(await client.get("/runs/not-a-uuid", headers=h), 404, "not_found")
    problem(await client.get("/nowhere", headers=h), 404, "not_found")
    response = await client.delete("/runs", headers=h)
    problem(response, 405, "method_not_allowed")
    assert "POST" in response.headers["allow"]


async def test_plan_first_runs_cannot_execute(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    response = await client.post(
        "/runs", json={"message": "send 60 to bob", "plan_first": True}, headers=bearer(keys.alice)
    )
    assert response.status_code == 202
    await settle(server)
    events = await all_events(client, keys.alice, response.json()["run_id"])
    assert isinstance(events[0], RunStarted)
    assert events[0].allowed_kinds == ["preview", "propose", "read"]
    assert any(e.type == "tool_call_rejected" for e in events)
