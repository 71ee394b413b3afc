"""``GET /runs/{run_id}/trace``: the run's waterfall, to its principal only."""

from __future__ import annotations

import httpx
import pytest

from fiduciary.server import Server

from .conftest import Keys, bearer, problem, settle, start_run

pytestmark = pytest.mark.timeout(60)


async def test_the_trace_of_a_run_waiting_for_approval(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "send 60")
    await settle(server)

    response = await client.get(f"/runs/{run_id}/trace", headers=bearer(keys.alice))

    assert response.status_code == 200, response.text
    trace = response.json()
    assert trace["run_id"] == str(run_id)
    kinds = [(s["kind"], s["name"], s["end"] is None) for s in trace["spans"]]
    assert ("agent", "invoke_agent fiduciary", False) in kinds
    assert ("tool", "execute_tool send", False) in kinds
    assert ("approval", "await_approval send", True) in kinds  # still waiting
    (send,) = [s for s in trace["spans"] if s["name"] == "execute_tool send"]
    assert send["attributes"]["fiduciary.tool.tier"] == "confirm"
    assert send["attributes"]["fiduciary.tool.outcome"] == "pending"


async def test_another_principals_trace_does_not_exist(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "hello")
    await settle(server)
    problem(await client.get(f"/runs/{run_id}/trace", headers=bearer(keys.bob)), 404, "not_found")
    admin = await client.get(f"/runs/{run_id}/trace", headers=bearer(keys.admin))
    assert admin.status_code == 200
