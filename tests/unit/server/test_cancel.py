"""Cancelling a run: 501 until the core has ``Agent.cancel``; with it, the drive stops and the
cancellation is recorded (the agent here stands in for the proposed core method)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from fiduciary import Agent, ManualClock
from fiduciary.demo import Billing
from fiduciary.events import RunFailed
from fiduciary.server import Server
from fiduciary.stores.base import Store

from ..conftest import Effects
from .conftest import (
    AppFactory,
    Keys,
    bearer,
    billing_agent,
    client_for,
    problem,
    settle,
    start_run,
)
from .test_sse import GatedModel, read_events

pytestmark = pytest.mark.timeout(30)


def cancelling_agent(
    store: Store, clock: ManualClock, effects: Effects, billing: Billing, model: Any
) -> Agent:
    base = billing_agent(store, clock, effects, billing)
    return Agent(
        model=model,
        capabilities=[c for n in base.gates.names if (c := base.gates.get(n)) is not None],
        store=store,
        clock=clock,
        authorize=lambda request: True,
    )


async def test_cancel_stops_the_drive_and_records_the_cancellation(
    make_app: AppFactory,
    keys: Keys,
    store: Store,
    clock: ManualClock,
    effects: Effects,
    billing: Billing,
) -> None:
    gated = GatedModel()
    agent = cancelling_agent(store, clock, effects, billing, gated)
    app = make_app(agent=agent)
    server: Server = app.state.server
    async with client_for(app) as client:
        run_id = await start_run(client, keys.alice, "hello there")
        gated.gate.release()
        gated.gate.release()
        _got, _ = await read_events(client, keys.alice, run_id, count=4)  # mid-answer
        assert server.drives.is_driving(run_id)
        problem(
            await client.post(f"/runs/{run_id}/cancel", headers=bearer(keys.bob)), 404, "not_found"
        )
        problem(
            await client.post(f"/runs/{run_id}/cancel", headers=bearer(keys.alice_reader)),
            403,
            "insufficient_scope",
        )
        with anyio.fail_after(10):
            response = await client.post(f"/runs/{run_id}/cancel", headers=bearer(keys.alice))
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "cancelled"
        assert not server.drives.is_driving(run_id)
        log = await store.read_events(run_id)
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert isinstance(log[-1], RunFailed)
        assert log[-1].reason == "aborted"
        assert log[-1].message == "cancelled by alice"
        for _ in range(100):
            gated.gate.release()  # nothing drives the run any more: no event follows
        await settle(server)
        assert len(await store.read_events(run_id)) == len(log)
        problem(
            await client.post(f"/runs/{run_id}/cancel", headers=bearer(keys.alice)),
            409,
            "run_state",
        )
        # a suspended run is cancelled too
        other = await start_run(client, keys.alice, "Please pay my open bills")
        await settle(server)
        response = await client.post(f"/runs/{other}/cancel", headers=bearer(keys.admin))
        assert response.json()["status"] == "cancelled"
