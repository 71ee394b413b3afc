"""Time travel over HTTP: replay, fork and diff a run; scopes and tenancy."""

from __future__ import annotations

import httpx
import pytest

from fiduciary.events import PendingAction, RunStarted, ToolCallEnd
from fiduciary.server import Server

from ..conftest import Effects
from .conftest import Keys, all_events, bearer, problem, settle, start_run

pytestmark = pytest.mark.timeout(30)


async def test_replay_fork_and_diff_over_http(
    client: httpx.AsyncClient, keys: Keys, server: Server, effects: Effects
) -> None:
    run_id = await start_run(client, keys.alice, "send 500 to bob")
    await settle(server)
    (pending,) = [
        e for e in await all_events(client, keys.alice, run_id) if isinstance(e, PendingAction)
    ]

    replayed = await client.post(f"/runs/{run_id}/replay", json={}, headers=bearer(keys.alice))
    assert replayed.status_code == 201, replayed.text
    replay_id = replayed.json()["run_id"]
    assert replayed.json()["title"].startswith("replay of ")
    events = await all_events(client, keys.alice, replay_id)
    assert isinstance(events[0], RunStarted)
    assert events[0].replay_of == run_id
    (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
    assert '"not_executed": "replay"' in end.output
    assert effects.payments == []

    forked = await client.post(
        f"/runs/{run_id}/fork",
        json={"at_seq": pending.seq, "decide": "deny", "reason": "no"},
        headers=bearer(keys.alice),
    )
    assert forked.status_code == 201, forked.text
    assert forked.json()["status"] == "completed"
    assert forked.json()["title"].startswith("FORK of ")
    assert effects.payments == []

    found = await client.get(f"/runs/{run_id}/diff/{replay_id}", headers=bearer(keys.alice))
    assert found.status_code == 200, found.text
    body = found.json()
    assert body["same"] is False
    assert body["first_divergence"]["a"]["type"] == "pending_action"
    assert "first divergence" in body["text"]


async def test_time_travel_keeps_to_the_callers_runs_and_scopes(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "send 500 to bob")
    await settle(server)
    for method, path, body in [
        ("POST", f"/runs/{run_id}/replay", {}),
        ("POST", f"/runs/{run_id}/fork", {"at_seq": 2}),
        ("GET", f"/runs/{run_id}/diff/{run_id}", None),
    ]:
        response = await client.request(method, path, json=body, headers=bearer(keys.bob))
        problem(response, 404, "not_found")
    reader = bearer(keys.alice_reader)
    problem(
        await client.post(f"/runs/{run_id}/replay", json={}, headers=reader),
        403,
        "insufficient_scope",
    )
    problem(
        await client.post(f"/runs/{run_id}/fork", json={"at_seq": 3}, headers=bearer(keys.alice)),
        422,
        "invalid_request",
    )
